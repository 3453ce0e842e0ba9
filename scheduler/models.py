from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from scheduler.choices import FINAL_STATES, LIVE_STATES, EventKind, JobState, Priority, Topology
from scheduler.core.jobspec import FIELD
from scheduler.core.lifecycle import Cause, StopCause

# Bounds are the job table's (scheduler/core/jobspec.py); tests/unit/test_jobspec.py checks the fields agree.
MILLI = FIELD["gpu_milli"]


class JobQuerySet(models.QuerySet):
    def live(self):
        return self.filter(state__in=LIVE_STATES)

    def pending(self):
        return self.filter(state=JobState.PENDING)


class Job(models.Model):
    """A researcher's job: what it needs, its contract, and where it stands."""

    cluster = models.ForeignKey("topology.Cluster", on_delete=models.PROTECT, related_name="jobs")
    project = models.ForeignKey("budgets.Unit", on_delete=models.PROTECT, related_name="jobs")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs")
    name = models.CharField(max_length=FIELD["name"].max_length, blank=True)
    command = models.TextField(blank=True)
    # Where and with what the agent runs it (client/execution.py): an absolute directory on the hosts
    # (empty: the account's home) and the job's own variables, NAME → VALUE.
    workdir = models.CharField(max_length=FIELD["workdir"].max_length, blank=True)
    env = models.JSONField(default=dict, blank=True)

    # What it needs.
    gpus = models.PositiveIntegerField()
    gpus_per_host = models.PositiveIntegerField(null=True, blank=True)
    gpu_type = models.CharField(max_length=FIELD["gpu_type"].max_length, blank=True,
                                help_text="Allowed GPU types, |-separated; empty: any.")
    gpu_milli = models.PositiveIntegerField(default=MILLI.default, validators=[MinValueValidator(MILLI.minimum),
                                                                               MaxValueValidator(MILLI.maximum)])
    topology = models.CharField(max_length=16, choices=Topology.choices, default=Topology.ANY)
    cpus = models.PositiveIntegerField(default=0)
    memory_gib = models.PositiveIntegerField(default=0)
    # A MIG instance of this profile on a GPU in MIG mode, instead of a whole GPU or a fraction (1-GPU jobs).
    mig_profile = models.CharField(max_length=FIELD["mig_profile"].max_length, blank=True, default="",
                                   help_text="MIG profile (e.g. 1g.10gb); empty: a whole GPU or a fraction.")

    # The contract.
    min_runtime = models.PositiveIntegerField(help_text="Seconds; 0 = unallocated (free, always preemptible).")
    resumable = models.BooleanField()
    max_runtime = models.PositiveIntegerField(null=True, blank=True, help_text="Seconds; empty: no limit.")
    restart_overhead = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="Seconds it holds its GPUs after each restart before it makes progress again (loading its "
                  "checkpoint); empty: the cluster policy's restart_overhead.")
    checkpoint_every = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(FIELD["checkpoint_every"].lowest),
                                           MaxValueValidator(FIELD["checkpoint_every"].maximum)],
        help_text="Seconds of progress between the checkpoints it saves; empty: not declared.")
    priority = models.CharField(max_length=8, choices=Priority.choices, default=Priority.NORMAL)

    # Where it stands.
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.PENDING, db_index=True)
    submitted_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True, help_text="First start.")
    run_started_at = models.DateTimeField(null=True, blank=True, help_text="Start of the current run.")
    run_protected_until = models.DateTimeField(
        null=True, blank=True, help_text="End of the current run's protection (set by the scheduler at its start).")
    ended_at = models.DateTimeField(null=True, blank=True)
    last_checkpoint_at = models.DateTimeField(null=True, blank=True)
    preemptions = models.PositiveIntegerField(default=0)
    requeued_at = models.DateTimeField(null=True, blank=True, help_text="When a preemption last requeued it.")
    restarts = models.PositiveIntegerField(default=0)
    exit_code = models.IntegerField(null=True, blank=True)
    # Why a failed job failed, in words (`no such user on node-01-h01: asmith`, `rank 0 exited with 3`).
    failure_reason = models.CharField(max_length=500, blank=True)

    # Written by the tick for the queue pages and the API.
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    pending_reason = models.CharField(max_length=1000, blank=True)
    estimated_start = models.DateTimeField(null=True, blank=True)

    # A stop in progress (preemption, cancel, limit, a failed rank): why (`scheduler.core.lifecycle.Cause` as
    # written: `job:812`, `drain:<host>`, `failed`, …), what failed for `failed`, and when SIGKILL falls.
    stop_cause = models.CharField(max_length=200, blank=True)
    stop_detail = models.CharField(max_length=200, blank=True)
    stop_deadline = models.DateTimeField(null=True, blank=True)
    # The job this one makes room for; its GPUs stay reserved for it meanwhile.
    preempted_for = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="preempted_victims"
    )
    # A pending job that preempted others: the GPUs held for it ("host:index"), its victims' and free ones,
    # until it starts, is cancelled, or the scheduler drops the claim with a reason (rule 4). Written by the tick.
    earmarked_gpus = models.JSONField(default=list, blank=True)

    # Simulated executor only: seconds of work the job needs, and done so far
    # (up to its last checkpoint, for a resumable job that was preempted).
    simulated_duration = models.PositiveIntegerField(null=True, blank=True)
    work_done = models.FloatField(default=0)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["cluster", "state"], name="scheduler_job_cluster_state")]
        constraints = [
            models.CheckConstraint(
                condition=Q(gpu_milli__gte=MILLI.minimum) & Q(gpu_milli__lte=MILLI.maximum),
                name="%(app_label)s_%(class)s_gpu_milli_range",
            ),
            models.CheckConstraint(
                condition=Q(gpu_milli=MILLI.maximum) | Q(gpus=1),
                name="%(app_label)s_%(class)s_fraction_one_gpu",
            ),
            models.CheckConstraint(
                condition=Q(mig_profile="") | Q(gpus=1, gpu_milli=MILLI.maximum),
                name="%(app_label)s_%(class)s_mig_one_gpu",
            ),
        ]

    def __str__(self):
        return f"job {self.pk} ({self.project}, {self.gpus} GPU)"

    @property
    def allocated(self) -> bool:
        return self.min_runtime > 0

    @property
    def allocation(self) -> str:
        return "allocated" if self.allocated else "unallocated"

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def is_live(self) -> bool:
        return self.state in LIVE_STATES

    @property
    def shown_state(self) -> str:
        """The state as pages say it: a live job asked to stop (cancelled, failing) is `stopping` until its
        processes are gone, not `running` with a second Cancel button."""
        return "stopping" if self.state in (JobState.STARTING, JobState.RUNNING) and self.stop_cause else self.state

    @property
    def stop(self) -> StopCause | None:
        """The stop in progress, typed (None: none); `failed` with what failed."""
        if self.stop_cause == Cause.FAILED:
            return StopCause(Cause.FAILED, self.stop_detail)
        return StopCause.parse(self.stop_cause)

    @property
    def shown_stop_cause(self) -> str:
        """The stop cause as the API and pages show it: `job:812`, `failed: rank 0 exited with 3`, …"""
        if self.stop_cause == Cause.FAILED:
            return str(StopCause(Cause.FAILED, self.stop_detail))
        return self.stop_cause

    @property
    def protected_until(self):
        """When this run's shield from fair-share preemption ends, as the scheduler decided it at the run's start:
        the minimum runtime, doubled per earlier preemption up to twice the cluster's cap
        (`scheduler.core.model.shield`; a job that needs a whole NVLink domain may take it once the contract,
        `protection`, ends)."""
        if self.run_started_at is None:
            return None
        if self.run_protected_until is not None:
            return self.run_protected_until
        return self.run_started_at + timezone.timedelta(seconds=self.min_runtime)  # a run started before 0009

    @property
    def gpu_types(self) -> list[str]:
        return [t for t in self.gpu_type.split("|") if t]

    @property
    def run(self) -> int:
        """Number of the current run: 0 for the first, +1 at every requeue."""
        return self.restarts


class JobEvent(models.Model):
    """One line of a job's history, with its cause and who or what caused it."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(default=timezone.now, db_index=True)
    kind = models.CharField(max_length=16, choices=EventKind.choices)
    detail = models.CharField(max_length=2000, blank=True)
    cause = models.CharField(max_length=200, blank=True)
    actor = models.CharField(max_length=150)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self):
        return f"{self.job_id} {self.kind} at {self.at:%Y-%m-%d %H:%M:%S}"


class GpuAssignment(models.Model):
    """A GPU (or a fraction of one) held by a job for one run.

    `released_at` is empty while the job holds it. The database refuses a
    second live holder of a whole GPU or of a MIG instance; fractions are
    bounded by the GPU's allocated_milli check.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="assignments")
    gpu = models.ForeignKey("topology.Gpu", on_delete=models.PROTECT, related_name="assignments")
    milli = models.PositiveIntegerField(default=1000)
    # A MIG job: the instance it holds on `gpu` (milli is then the profile's share).
    mig_instance = models.ForeignKey("topology.MigInstance", null=True, blank=True, on_delete=models.PROTECT,
                                     related_name="assignments")
    assigned_at = models.DateTimeField(default=timezone.now)
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["gpu__host__name", "gpu__index"]
        constraints = [
            models.UniqueConstraint(
                fields=["gpu"],
                condition=Q(released_at__isnull=True, milli=1000),
                name="%(app_label)s_%(class)s_one_live_holder",
            ),
            models.CheckConstraint(
                condition=Q(milli__gte=1) & Q(milli__lte=1000),
                name="%(app_label)s_%(class)s_milli_range",
            ),
            models.UniqueConstraint(
                fields=["mig_instance"],
                condition=Q(released_at__isnull=True, mig_instance__isnull=False),
                name="%(app_label)s_%(class)s_one_live_instance_holder",
            ),
        ]

    def __str__(self):
        return f"{self.gpu} → job {self.job_id}"


class JobProcess(models.Model):
    """One rank of one run of a job on one host, as its agent reports it."""

    class State(models.TextChoices):
        ASSIGNED = "assigned", "assigned"
        RUNNING = "running", "running"
        EXITED = "exited", "exited"
        LOST = "lost", "lost"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="processes")
    host = models.ForeignKey("topology.Host", on_delete=models.PROTECT, related_name="processes")
    run = models.PositiveIntegerField()
    rank = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.ASSIGNED)
    pid = models.IntegerField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    output_tail = models.TextField(blank=True)
    # What the agent said went wrong with this rank: it could not start it, or the kernel killed it.
    error = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["job", "run", "rank"]
        constraints = [
            models.UniqueConstraint(fields=["job", "run", "rank"], name="%(app_label)s_%(class)s_unique_rank"),
        ]

    def __str__(self):
        return f"job {self.job_id} run {self.run} rank {self.rank} on {self.host_id}"


class Tick(models.Model):
    """One scheduling pass over a cluster: how long it took and what it did."""

    cluster = models.ForeignKey("topology.Cluster", on_delete=models.CASCADE, related_name="ticks")
    started_at = models.DateTimeField(db_index=True)
    duration = models.FloatField(help_text="Seconds, lock to commit.")
    snapshot_seconds = models.FloatField(default=0)
    decide_seconds = models.FloatField(default=0)
    apply_seconds = models.FloatField(default=0)
    started = models.PositiveIntegerField(default=0)
    preempted = models.PositiveIntegerField(default=0)
    pending = models.PositiveIntegerField(default=0)
    running = models.PositiveIntegerField(default=0)
    leader = models.CharField(max_length=200, blank=True)
    # Unit name → allocated usage ratio at the start of the tick (for the queue page).
    unit_ratios = models.JSONField(default=dict, blank=True)
    # Every project with a job still waiting, in queue order, and why it stands after the previous one, as the
    # core explained its order (`core.model.QueueStep` fields; the queue page renders them with
    # `core.reasons.queue_step`).
    queue_order = models.JSONField(default=list, blank=True)
    # Domains or hosts held for head-of-line jobs (rule 5): job, domain, hosts, expected start, reason.
    reservations = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        get_latest_by = "started_at"

    def __str__(self):
        return f"tick {self.cluster} {self.started_at:%H:%M:%S}"


class ClusterSample(models.Model):
    """The cluster at one moment, for the dashboard's history (DESIGN §5 measures).

    Written by the tick at most once per `ALLOT_SAMPLE_SECONDS` (one row per
    cluster per minute by default) and pruned beyond the fair-share window.
    GPU counts are in GPUs with milli precision; the four states add up to
    `total_gpus` (see scheduler/core/measures.py).
    """

    cluster = models.ForeignKey("topology.Cluster", on_delete=models.CASCADE, related_name="samples")
    at = models.DateTimeField()
    total_gpus = models.PositiveIntegerField()
    allocated = models.FloatField()
    unallocated = models.FloatField()
    idle = models.FloatField()
    unavailable = models.FloatField()
    free_gpus = models.PositiveIntegerField(help_text="Whole free GPUs (fragmentation counts these).")
    largest_placeable = models.PositiveIntegerField(help_text="Largest domain job that could start now.")
    # Job size k -> stranded(k), 0..1: {"8": 0.1, "16": 0.4, ...}.
    stranded = models.JSONField(default=dict)
    pending_jobs = models.PositiveIntegerField(default=0)
    pending_gpus = models.PositiveIntegerField(default=0)
    pending_allocated_gpus = models.PositiveIntegerField(default=0)
    running_jobs = models.PositiveIntegerField(default=0)
    # Ticks since the previous sample, and how long they took.
    ticks = models.PositiveIntegerField(default=0)
    tick_seconds_mean = models.FloatField(default=0)
    tick_seconds_max = models.FloatField(default=0)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["cluster", "at"], name="scheduler_sample_cluster_at")]

    def __str__(self):
        return f"sample {self.cluster} {self.at:%Y-%m-%d %H:%M}"

    @property
    def healthy(self) -> float:
        return self.allocated + self.unallocated + self.idle


class TickHistogram(models.Model):
    """Tick durations as a Prometheus histogram: counts that only grow, one row per cluster.

    Kept apart from `Tick` rows (which are pruned) so `/metrics` can serve a
    true cumulative histogram whatever the scheduler process.
    """

    cluster = models.OneToOneField("topology.Cluster", on_delete=models.CASCADE, related_name="tick_histogram")
    count = models.PositiveBigIntegerField(default=0)
    sum_seconds = models.FloatField(default=0)
    # Observations per bucket of scheduler.history.TICK_BUCKETS, the last one for +Inf (not cumulative).
    buckets = models.JSONField(default=list)

    def __str__(self):
        return f"tick histogram of {self.cluster}"
