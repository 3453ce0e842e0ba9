"""A steady demo workload for `make run`: real submissions, through the same service as the API,
and (with `faults`) GPU faults handled by the cluster's health policy, then repaired.

It keeps a queue on every simulated cluster: debug jobs, multi-rack training,
unallocated sweeps, from the demo's members, submitting only while the queue
is shorter than `max_pending` so the demo stays lively but bounded.
"""

import random
from datetime import timedelta

from django.db.models import Exists, OuterRef
from django.utils import timezone

from budgets.choices import Role
from budgets.models import Membership
from scheduler.models import Job
from scheduler.services import JobError, JobRequest, job_submit
from topology.choices import Executor, HostState
from topology.health import HEALTH_ACTOR
from topology.models import Cluster, Host, HostEvent
from topology.services import host_report_xid, host_resume

# (weight, gpus choices, topology, min_runtime choices, work seconds range, resumable). The demo runs in real
# time (one clock for work, protection, estimates and drains), so its jobs are short ones: minutes, not hours.
SHAPES = [
    (5, [1, 2, 4], "any", [300, 600], (180, 900), False),  # debug
    (4, [4, 8], "any", [600, 900], (600, 2400), True),  # single-host training
    (2, [16, 32, 64], "domain", [900, 1800], (1200, 3600), True),  # rack-scale training
    (3, [1, 4, 8], "any", [0], (300, 1800), True),  # unallocated sweeps
]


# The demo's hardware trouble: (weight, XID). Most drain under the default policy; 13 and 74 are only recorded.
FAULTS = [(4, 79), (2, 48), (2, 94), (1, 95), (2, 13), (1, 74)]
FAULT_ACTOR = "demo:fault-injector"
REPAIR_ACTOR = "demo:repair-crew"


class DemoLoad:
    """Submissions on every simulated cluster; with `faults`, also GPU faults now and then, and their repair.

    Faults go through the same path as an agent's XID report (the cluster's health policy decides), so the
    demo shows automated drains, their progress and the repair list; a host the injector broke is repaired
    (resumed) by the demo's repair crew once drained and `repair_after` seconds after the fault. The crew
    leaves every other host alone: a drain by the on-call stays until the on-call resumes it.
    """

    def __init__(self, *, seed: int = 7, max_pending: int = 40, per_step: int = 2, faults: bool = False,
                 fault_every: float = 240, repair_after: float = 600, max_faulty_hosts: int = 2):
        self.random = random.Random(seed)
        self.max_pending = max_pending
        self.per_step = per_step
        self.members = list(
            Membership.objects.filter(role=Role.MEMBER, unit__children__isnull=True)
            .select_related("user", "unit").order_by("unit__name", "user__username")
        )
        # Faults draw from their own stream, so the workload is the same with or without them.
        self.faults = random.Random(seed + 1) if faults else None
        self.fault_every = fault_every
        self.repair_after = repair_after
        self.max_faulty_hosts = max_faulty_hosts
        self.next_fault_at = None

    def step(self) -> int:
        submitted = 0
        for cluster in Cluster.objects.filter(executor=Executor.SIMULATED):
            if self.faults is not None:
                self._faults(cluster)
            if not self.members or Job.objects.pending().filter(cluster=cluster).count() >= self.max_pending:
                continue
            for _ in range(self.per_step):
                submitted += self._submit(cluster)
        return submitted

    def _faults(self, cluster) -> None:
        now = timezone.now()
        # The crew repairs only what its own injector broke: a host the health policy took out for an XID
        # the injector reported, drained (or down) long enough. An on-call's drain is left to the on-call.
        broken_by_injector = HostEvent.objects.filter(
            host=OuterRef("pk"), kind=HostEvent.Kind.XID, actor=FAULT_ACTOR, at=OuterRef("state_changed_at"))
        for host in Host.objects.filter(
            Exists(broken_by_injector), domain__cluster=cluster, state__in=[HostState.DRAINED, HostState.DOWN],
            state_actor=HEALTH_ACTOR, state_changed_at__lte=now - timedelta(seconds=self.repair_after),
        ):
            host_resume(host=host, actor=REPAIR_ACTOR, reason="repaired: GPU reseated and field diagnostics passed")
        if self.next_fault_at is None:
            self.next_fault_at = now + timedelta(seconds=self.faults.uniform(0.5, 1.0) * self.fault_every)
        if now < self.next_fault_at:
            return
        self.next_fault_at = now + timedelta(seconds=self.faults.uniform(0.5, 1.5) * self.fault_every)
        faulty = Host.objects.filter(domain__cluster=cluster, state_actor__in=[HEALTH_ACTOR, REPAIR_ACTOR]).exclude(
            state=HostState.UP).count()
        candidates = list(Host.objects.filter(domain__cluster=cluster, state=HostState.UP).order_by("name"))
        if faulty >= self.max_faulty_hosts or not candidates:
            return
        host = self.faults.choice(candidates)
        code = self.faults.choices([code for _, code in FAULTS], [weight for weight, _ in FAULTS])[0]
        host_report_xid(host=host, code=code, gpu=self.faults.randrange(max(1, host.gpu_count)), at=now,
                        actor=FAULT_ACTOR)

    def _submit(self, cluster) -> int:
        weights = [shape[0] for shape in SHAPES]
        _, gpus_choices, topology, min_runtimes, (low, high), resumable = self.random.choices(SHAPES, weights)[0]
        member = self.random.choice(self.members)
        gpus = self.random.choice(gpus_choices)
        min_runtime = self.random.choice(min_runtimes)
        request = JobRequest(
            cluster=cluster.name, project=member.unit.name, gpus=gpus, min_runtime=min_runtime,
            resumable=resumable, topology=topology, name=f"demo-{member.unit.name}-{gpus}g",
            command=f"python train.py --gpus {gpus}", simulated_duration=self.random.randint(low, high),
            gpu_type="GB200" if topology == "domain" else "",
            # Training checkpoints every 10 minutes of work: the scheduler times fair-share preemptions by them.
            checkpoint_every=600 if resumable and min_runtime else None,
        )
        try:
            job_submit(user=member.user, request=request)
        except JobError:
            # e.g. an allocated job for a project with no share: submit it unallocated instead.
            request.min_runtime = 0
            try:
                job_submit(user=member.user, request=request)
            except JobError:
                return 0
        return 1
