import hashlib
import secrets
from datetime import datetime

from django.db import models, transaction
from django.db.models import Count, Q, Sum
from django.utils import timezone

from scheduler.core import model as core
from scheduler.core.mig import PROFILES as MIG_PROFILES
from topology.choices import AgentMode, Containment, DomainKind, Executor, GpuHealth, HostState
from topology.health import HealthPolicy, default_health_policy, parse_health_policy, xid_meaning
from topology.spec import SUBMIT_ALL, parse_submit_policy

# Hosts that take new jobs, as the scheduler's core defines them: their healthy GPUs are the cluster's capacity
# and what every share is a share of (`Cluster.schedulable_gpus`).
SCHEDULABLE_STATES = tuple(sorted(core.SCHEDULABLE_STATES))
# Hosts of an `agent` cluster wait in this state until their agent first reports.
AWAITING_AGENT_REASON = "waiting for its agent to register"
# Hosts in service: up, or still running work while draining. Their healthy GPUs are the ones available (the
# inventory pages' "68 of 72 GPUs healthy"), never what entitlements are computed from.
IN_SERVICE_STATES = (HostState.UP, HostState.DRAINING)


def submit_by_all() -> str:
    return SUBMIT_ALL


class Cluster(models.Model):
    """A pool of hosts scheduled together, with its scheduling policy."""

    name = models.SlugField(max_length=64, unique=True)
    tick_seconds = models.PositiveIntegerField(default=5)
    window_seconds = models.PositiveIntegerField(default=7 * 86400)
    max_min_runtime_seconds = models.PositiveIntegerField(default=8 * 3600)
    grace_period_seconds = models.PositiveIntegerField(default=60)
    unallocated_grace_seconds = models.PositiveIntegerField(default=10)
    fast_lane_gpus = models.PositiveIntegerField(default=0)
    fast_lane_max_min_runtime_seconds = models.PositiveIntegerField(default=15 * 60)
    heartbeat_timeout_seconds = models.PositiveIntegerField(default=90)
    restart_overhead_seconds = models.PositiveIntegerField(
        default=300, help_text="Seconds a job holds its GPUs after each restart before it makes progress again, for "
                               "jobs that give none (what a preemption costs beyond the work since the checkpoint).")
    unallocated_backoff_seconds = models.PositiveIntegerField(
        default=300, help_text="After its n-th preemption an unallocated job waits this × 2^(n-1) before it may "
                               "start again (the bound on churn for jobs without protection).")
    max_unallocated_backoff_seconds = models.PositiveIntegerField(
        default=3600, help_text="The longest an unallocated job backs off after a preemption.")
    max_preempted_protection_seconds = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="Each preemption doubles a job's next shield from fair-share preemption up to this (empty: twice "
                  "the cap on minimum runtime); jobs that need a whole NVLink domain may take it once the cap is over.")
    max_checkpoint_wait_seconds = models.PositiveIntegerField(
        default=30 * 60,
        help_text="The longest a job waits for a running job's declared checkpoint before preempting it for fair "
                  "share anyway (0: nobody waits for checkpoints).")
    executor = models.CharField(max_length=16, choices=Executor.choices, default=Executor.AGENT)
    # Agents never run a job as uid 0 (an account mapped to root, or a single-user agent running as root)
    # unless this is set.
    allow_root_jobs = models.BooleanField(
        default=False, help_text="Let agents run jobs as uid 0 (root accounts, single-user agents run as root).",
    )
    # Health events -> actions: {"xid": {"79": "drain", ...}, "heartbeat_lost": "down", "gpus_missing": "drain"}.
    health_policy = models.JSONField(
        default=default_health_policy, blank=True,
        help_text="Health events and the action each takes (drain, cordon, down, none); see topology/health.py.",
    )
    # Who may submit: "all", "allocated" (units with a share of this cluster) or a list of unit names.
    submit_policy = models.JSONField(
        default=submit_by_all, blank=True,
        help_text="Who may submit: \"all\", \"allocated\" (units with a share here) or a list of unit names.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    @property
    def submit_rule(self) -> str:
        """The policy as the cluster file says it: `submit: allocated`, `submit: [olmo, nlp]`."""
        value = self.submit_policy
        return f"submit: [{', '.join(value)}]" if isinstance(value, list) else f"submit: {value}"

    @property
    def shield_cap_seconds(self) -> float:
        """The longest shield from fair-share preemption a preempted job gets (`model.preempted_protection_cap`)."""
        return core.preempted_protection_cap(self.scheduling_policy())

    def scheduling_policy(self) -> core.Policy:
        return core.Policy(
            tick=self.tick_seconds,
            window=self.window_seconds,
            max_min_runtime=self.max_min_runtime_seconds,
            grace_period=self.grace_period_seconds,
            unallocated_grace=self.unallocated_grace_seconds,
            fast_lane_gpus=self.fast_lane_gpus,
            fast_lane_max_min_runtime=self.fast_lane_max_min_runtime_seconds,
            heartbeat_timeout=self.heartbeat_timeout_seconds,
            restart_overhead=self.restart_overhead_seconds,
            unallocated_backoff=self.unallocated_backoff_seconds,
            max_unallocated_backoff=self.max_unallocated_backoff_seconds,
            max_preempted_protection=self.max_preempted_protection_seconds,
            max_checkpoint_wait=self.max_checkpoint_wait_seconds,
        )

    def clean(self):
        from django.core.exceptions import ValidationError

        policy, problems = parse_health_policy(self.health_policy, "health_policy")
        if problems:
            raise ValidationError({"health_policy": problems})
        self.health_policy = policy
        submit, problems = parse_submit_policy(self.submit_policy, "submit_policy")
        if problems:
            raise ValidationError({"submit_policy": problems})
        self.submit_policy = submit

    @property
    def health(self) -> HealthPolicy:
        return HealthPolicy.of(self.health_policy)

    def gpu_counts(self) -> dict:
        """Total GPUs, and healthy ones on hosts in service (up or draining: available), in two queries."""
        gpus = Gpu.objects.filter(host__domain__cluster=self)
        total = gpus.count()
        healthy = gpus.filter(health=GpuHealth.OK, host__state__in=IN_SERVICE_STATES).count()
        return {"total": total, "healthy": healthy}

    def schedulable_gpus(self) -> int:
        """Healthy GPUs on hosts that take new jobs (`core.schedulable_gpus`, DESIGN §3 rule 2): what every
        share of the cluster is a share of, on the budget pages as in the scheduler. One query."""
        return Gpu.objects.filter(host__domain__cluster=self, health=GpuHealth.OK,
                                  host__state__in=SCHEDULABLE_STATES).count()

    def largest_healthy_domain(self) -> int:
        """GPUs in the largest domain counting only healthy GPUs on hosts in service."""
        best = (
            Domain.objects.filter(cluster=self)
            .annotate(
                healthy=Count(
                    "hosts__gpus",
                    filter=Q(hosts__gpus__health=GpuHealth.OK, hosts__state__in=IN_SERVICE_STATES),
                )
            )
            .order_by("-healthy")
            .values_list("healthy", flat=True)
            .first()
        )
        return best or 0

    def largest_domain_capacity(self) -> int:
        """GPUs the largest domain could ever hold, all hosts healthy."""
        best = (
            Domain.objects.filter(cluster=self)
            .annotate(capacity=Sum("hosts__gpu_count"))
            .order_by("-capacity")
            .values_list("capacity", flat=True)
            .first()
        )
        return best or 0


class Block(models.Model):
    """Network locality above NVLink (a spine, a pod)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="blocks")
    name = models.SlugField(max_length=64)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="%(app_label)s_%(class)s_unique_name"),
        ]

    def __str__(self):
        return self.name


class Domain(models.Model):
    """An NVLink domain: a GB200 NVL72 rack (18 trays x 4 GPUs) or one HGX server."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="domains")
    block = models.ForeignKey(Block, null=True, blank=True, on_delete=models.SET_NULL, related_name="domains")
    name = models.SlugField(max_length=64, unique=True)
    kind = models.CharField(max_length=16, choices=DomainKind.choices, default=DomainKind.SERVER)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    @property
    def is_rack(self) -> bool:
        return self.kind in (DomainKind.NVL72, DomainKind.RACK)


class Host(models.Model):
    """A machine (an NVL72 compute tray, an HGX server) and its service state."""

    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="hosts")
    name = models.SlugField(max_length=96, unique=True)
    position = models.PositiveIntegerField(help_text="Tray or slot number inside the domain, from 1.")
    gpu_type = models.CharField(max_length=32)
    gpu_count = models.PositiveIntegerField()
    cpus = models.PositiveIntegerField(default=0, help_text="0: not constrained")
    memory_gib = models.PositiveIntegerField(default=0, help_text="0: not constrained")
    fast_lane = models.BooleanField(default=False)
    state = models.CharField(max_length=16, choices=HostState.choices, default=HostState.UP)
    state_reason = models.CharField(max_length=500, blank=True)
    state_actor = models.CharField(max_length=150, blank=True)
    state_changed_at = models.DateTimeField(default=timezone.now)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    # Where peers reach this host (MASTER_ADDR for multi-host jobs), as its agent reports it.
    address = models.CharField(max_length=255, blank=True)
    # How its agent runs jobs, as the agent reports it at each heartbeat.
    agent_mode = models.CharField(max_length=16, choices=AgentMode.choices, blank=True,
                                  help_text="root: each job as its submitter; single-user: every job as the "
                                            "agent's own account, only that account's jobs.")
    agent_account = models.CharField(max_length=64, blank=True, help_text="A single-user agent's own account.")
    containment = models.CharField(max_length=8, choices=Containment.choices, blank=True,
                                   help_text="How the agent contains each job rank: cgroup v2, v1, or none "
                                             "(process groups only).")
    containment_note = models.CharField(max_length=300, blank=True,
                                        help_text="What the agent's containment cannot do on this host.")
    # Rule 7 as the scheduler's core last decided it for this drain (HostChange.leaves), kept by the tick.
    drain_leaves = models.JSONField(
        default=list, blank=True,
        help_text="While draining: when each job is expected to leave and why, as the scheduler last decided "
                  "([{job, at, why}], the last first); empty until its first tick of the drain.")

    class Meta:
        ordering = ["domain__name", "position"]
        constraints = [
            models.UniqueConstraint(fields=["domain", "position"], name="%(app_label)s_%(class)s_unique_position"),
        ]

    def __str__(self):
        return self.name

    @property
    def cluster(self) -> Cluster:
        return self.domain.cluster

    @property
    def schedulable(self) -> bool:
        return self.state in SCHEDULABLE_STATES

    def planned_leaves(self) -> dict[int, tuple[datetime, str]]:
        """While draining: job id → when it is expected to leave and why then, as the scheduler last decided
        (rule 7). A job on the host but not here is not decided yet: the next tick decides it."""
        return {entry["job"]: (datetime.fromisoformat(entry["at"]), entry["why"]) for entry in self.drain_leaves or ()}

    def set_state(self, state: str, *, actor: str, reason: str, at=None, keep_reason: bool = False) -> "HostEvent":
        """Change state, keeping who, why and when on the host and in its history.

        `keep_reason`: a state change that is not a new decision (a drain that finished): the host keeps the
        reason, who gave it and when, as `sinfo -R` does, until someone resumes it; the history has the change.
        """
        at = at or timezone.now()
        before = self.state
        self.state = state
        # What the scheduler decided for a drain holds for that drain only; the next tick decides anew.
        self.drain_leaves = []
        if keep_reason:
            self.save(update_fields=["state", "drain_leaves"])
        else:
            self.state_reason = reason
            self.state_actor = actor
            self.state_changed_at = at
            self.save(update_fields=["state", "state_reason", "state_actor", "state_changed_at", "drain_leaves"])
        return HostEvent.objects.create(
            host=self, at=at, kind=HostEvent.Kind.STATE, actor=actor,
            detail=f"{before} → {state}: {reason}",
        )


class Gpu(models.Model):
    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveIntegerField()
    health = models.CharField(max_length=16, choices=GpuHealth.choices, default=GpuHealth.OK)
    # Milli-GPUs held by live jobs; kept by the scheduler's writer in the same
    # transaction as the assignments, so the database refuses an overcommit.
    # A MIG instance holds its compute slices' share (mig.profile_milli), so
    # this bound also keeps a MIG GPU within its 7 compute slices.
    allocated_milli = models.PositiveIntegerField(default=0)
    # MIG mode (set from the cluster file): the GPU takes only jobs asking for a
    # MIG profile, on the instances of its layout (MigInstance).
    mig_enabled = models.BooleanField(default=False)
    # What NVML last said of it (the agent's heartbeat); None: not reported (no NVML, or not supported).
    uuid = models.CharField(max_length=100, blank=True)
    ecc_uncorrected_volatile = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Uncorrected (double-bit) ECC errors since the driver loaded.")
    retired_pages_pending = models.BooleanField(null=True, blank=True)
    remapped_rows_pending = models.BooleanField(null=True, blank=True)

    class Meta:
        ordering = ["host__name", "index"]
        constraints = [
            models.UniqueConstraint(fields=["host", "index"], name="%(app_label)s_%(class)s_unique_index"),
            models.CheckConstraint(
                condition=Q(allocated_milli__gte=0) & Q(allocated_milli__lte=1000),
                name="%(app_label)s_%(class)s_no_overcommit",
            ),
        ]

    def __str__(self):
        return self.gpu_id

    @property
    def gpu_id(self) -> str:
        return f"{self.host.name}:{self.index}"

    def mig_layout(self) -> tuple[tuple[str, int], ...]:
        """The instances created on this GPU now, as (profile, start slot) by start slot."""
        return tuple(self.mig_instances.filter(destroyed_at__isnull=True).order_by("start")
                     .values_list("profile", "start"))


class MigInstance(models.Model):
    """A MIG GPU instance created on a GPU in MIG mode (80 GB A100/H100 geometry, scheduler/core/mig.py).

    The scheduler creates instances for the jobs it places and destroys idle
    ones only when it gives a GPU with no job on it a new layout; a destroyed
    instance is kept (`destroyed_at`) for the history of the jobs that ran on
    it. Live instances of one GPU never share a start slot (the database
    refuses it); the writer checks the full geometry (mig.validate_layout).
    A live job holds an instance through its GpuAssignment, and the database
    refuses a second live holder.
    """

    PROFILES = tuple(MIG_PROFILES)

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="mig_instances")
    profile = models.CharField(max_length=16, choices=[(p, p) for p in PROFILES])
    start = models.PositiveSmallIntegerField(help_text="First memory slice (0-7) of the instance.")
    created_at = models.DateTimeField(default=timezone.now)
    destroyed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["gpu", "start", "id"]
        constraints = [
            models.UniqueConstraint(fields=["gpu", "start"], condition=Q(destroyed_at__isnull=True),
                                    name="%(app_label)s_%(class)s_one_live_per_start"),
            models.CheckConstraint(condition=Q(profile__in=tuple(MIG_PROFILES)),
                                   name="%(app_label)s_%(class)s_known_profile"),
            models.CheckConstraint(condition=Q(start__lte=6), name="%(app_label)s_%(class)s_start_range"),
        ]

    def __str__(self):
        return f"{self.profile}@{self.start} on GPU {self.gpu_id}"

    @staticmethod
    def stable_id(host: str, index: int, start: int) -> str:
        """The id the agent uses in CUDA_VISIBLE_DEVICES when NVML cannot tell the instance's real UUID."""
        return f"MIG-{host}-{index}-{start}"


class HostEvent(models.Model):
    """What happened to a host: state changes, health events, heartbeats lost."""

    class Kind(models.TextChoices):
        STATE = "state", "state change"
        XID = "xid", "XID error"
        GPU_MISSING = "gpu_missing", "GPUs missing"
        HEARTBEAT_LOST = "heartbeat_lost", "heartbeat lost"
        INVENTORY = "inventory", "inventory change"
        NVML_ERROR = "nvml_error", "NVML error"
        ECC = "ecc", "uncorrected ECC errors"
        ROWS_PENDING = "rows_pending", "memory repair pending"

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(default=timezone.now, db_index=True)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    detail = models.CharField(max_length=1000)
    actor = models.CharField(max_length=150)
    # The XID code of an `xid` event (for its meaning and for /metrics).
    code = models.PositiveIntegerField(null=True, blank=True)
    # The GPU a health event names (its index on the host); None: the host as a whole.
    gpu = models.PositiveSmallIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["host", "kind", "at"], name="topology_hostevent_host_kind")]

    def __str__(self):
        return f"{self.host} {self.kind} {self.at:%Y-%m-%d %H:%M}"

    @property
    def meaning(self) -> str:
        """NVIDIA's name for the XID of an `xid` event; '' otherwise."""
        return xid_meaning(self.code) if self.kind == self.Kind.XID else ""


def hash_agent_key(key: str) -> str:
    """How a token is kept: its SHA-256 (the key is 256 random bits, so a fast hash is enough)."""
    return hashlib.sha256(key.encode()).hexdigest()


class AgentTokenQuerySet(models.QuerySet):
    def live(self):
        return self.filter(revoked_at__isnull=True)


class AgentToken(models.Model):
    """A secret a host's agent presents; it acts for that host only. Only its hash is kept: the key is
    shown once, when issued (`manage.py agent_token HOST`, topology.services.agent_token_issue)."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="agent_tokens")
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8, help_text="The key's first characters, to tell tokens apart.")
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.CharField(max_length=150, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.CharField(max_length=150, blank=True)
    revoke_reason = models.CharField(max_length=500, blank=True)

    objects = AgentTokenQuerySet.as_manager()
    # Set on the instance that issued it, never stored: the key itself.
    key: str = ""

    class Meta:
        ordering = ["host__name", "-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["host"], condition=Q(revoked_at__isnull=True),
                                    name="%(app_label)s_%(class)s_one_live_per_host"),
        ]

    def __str__(self):
        return f"agent token {self.prefix}… of {self.host}" + (" (revoked)" if self.revoked_at else "")

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    @classmethod
    def find(cls, key: str) -> "AgentToken | None":
        """The live token with this key, or None."""
        return (cls.objects.live().select_related("host__domain__cluster")
                .filter(key_hash=hash_agent_key(key)).first())

    @classmethod
    def issue(cls, *, host: Host, actor: str, reason: str = "") -> "AgentToken":
        """A new token for `host`, its live one revoked in the same transaction; `.key` holds the key, the
        only time it is known. Recorded in the host's history."""
        key = secrets.token_hex(32)
        now = timezone.now()
        with transaction.atomic():
            Host.objects.select_for_update().filter(pk=host.pk).first()  # one issue per host at a time
            revoked = cls.objects.live().filter(host=host).update(
                revoked_at=now, revoked_by=actor, revoke_reason=reason or "replaced by a new token")
            token = cls.objects.create(host=host, key_hash=hash_agent_key(key), prefix=key[:8], created_at=now,
                                       created_by=actor)
            HostEvent.objects.create(host=host, at=now, kind=HostEvent.Kind.INVENTORY, actor=actor,
                                     detail=f"agent token {token.prefix}… issued"
                                            + (", the previous one revoked" if revoked else "")
                                            + (f": {reason}" if reason else ""))
        token.key = key
        return token

    def revoke(self, *, actor: str, reason: str) -> bool:
        """Revoke this token now (its agent is refused from its next heartbeat); False if it already was."""
        now = timezone.now()
        if not AgentToken.objects.filter(pk=self.pk, revoked_at__isnull=True).update(
                revoked_at=now, revoked_by=actor, revoke_reason=reason):
            return False
        self.revoked_at, self.revoked_by, self.revoke_reason = now, actor, reason
        HostEvent.objects.create(host=self.host, at=now, kind=HostEvent.Kind.INVENTORY, actor=actor,
                                 detail=f"agent token {self.prefix}… revoked" + (f": {reason}" if reason else ""))
        return True

    @classmethod
    def for_host(cls, host: Host) -> "AgentToken":
        """A new token for `host` (its previous one revoked), with `.key` set: for tests and scripts."""
        return cls.issue(host=host, actor="system:test", reason="issued for a test")
