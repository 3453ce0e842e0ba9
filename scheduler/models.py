from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from scheduler.choices import FINAL_STATES, LIVE_STATES, EventKind, JobState, Priority, Topology


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
    name = models.CharField(max_length=200, blank=True)
    command = models.TextField(blank=True)

    # What it needs.
    gpus = models.PositiveIntegerField()
    gpus_per_host = models.PositiveIntegerField(null=True, blank=True)
    gpu_type = models.CharField(max_length=200, blank=True, help_text="Allowed GPU types, |-separated; empty: any.")
    gpu_milli = models.PositiveIntegerField(default=1000, validators=[MinValueValidator(1), MaxValueValidator(1000)])
    topology = models.CharField(max_length=16, choices=Topology.choices, default=Topology.ANY)
    cpus = models.PositiveIntegerField(default=0)
    memory_gib = models.PositiveIntegerField(default=0)

    # The contract.
    min_runtime = models.PositiveIntegerField(help_text="Seconds; 0 = unallocated (free, always preemptible).")
    resumable = models.BooleanField()
    max_runtime = models.PositiveIntegerField(null=True, blank=True, help_text="Seconds; empty: no limit.")
    priority = models.CharField(max_length=8, choices=Priority.choices, default=Priority.NORMAL)

    # Where it stands.
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.PENDING, db_index=True)
    submitted_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True, help_text="First start.")
    run_started_at = models.DateTimeField(null=True, blank=True, help_text="Start of the current run.")
    ended_at = models.DateTimeField(null=True, blank=True)
    last_checkpoint_at = models.DateTimeField(null=True, blank=True)
    preemptions = models.PositiveIntegerField(default=0)
    restarts = models.PositiveIntegerField(default=0)
    exit_code = models.IntegerField(null=True, blank=True)

    # Written by the tick for the queue pages and the API.
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    pending_reason = models.CharField(max_length=1000, blank=True)
    estimated_start = models.DateTimeField(null=True, blank=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["cluster", "state"], name="scheduler_job_cluster_state")]
        constraints = [
            models.CheckConstraint(
                condition=Q(gpu_milli__gte=1) & Q(gpu_milli__lte=1000),
                name="%(app_label)s_%(class)s_gpu_milli_range",
            ),
            models.CheckConstraint(
                condition=Q(gpu_milli=1000) | Q(gpus=1),
                name="%(app_label)s_%(class)s_fraction_one_gpu",
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
    def protected_until(self):
        if self.run_started_at is None:
            return None
        return self.run_started_at + timezone.timedelta(seconds=self.min_runtime)

    @property
    def gpu_types(self) -> list[str]:
        return [t for t in self.gpu_type.split("|") if t]


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
    second live holder of a whole GPU; fractions are bounded by the tick.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="assignments")
    gpu = models.ForeignKey("topology.Gpu", on_delete=models.PROTECT, related_name="assignments")
    milli = models.PositiveIntegerField(default=1000)
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
        ]

    def __str__(self):
        return f"{self.gpu} → job {self.job_id}"
