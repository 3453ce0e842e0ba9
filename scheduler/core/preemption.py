"""Rule 4: which running jobs a pending allocated job may preempt, and which it does.

Candidates are kept in one order for the whole tick, the order victims are
preferred in: unallocated jobs first, then allocated jobs past their minimum
runtime of the most over-served projects first (ratio at the start of the
tick); inside a project resumable jobs first, then the least a preemption
costs (the work since the last periodic checkpoint plus the restart overhead
its next run will hold its GPUs for, in GPU-seconds; never a checkpoint a job
might save when told to stop), then the fewest GPUs. Candidates sit in per-project
blocks so that a project the gainer may not take from is skipped at once.

A search walks the order over the blocks the gainer may take from. Each
candidate counts toward the scope it frees GPUs in (a host for single-host
jobs, a domain for multi-host ones, the pool for `any`/`preferred` jobs larger
than any domain, a GPU for a fraction); candidates in scopes where even every
GPU the gainer may take would not be enough are skipped (those sums are kept
per set of blocks, updated as victims are taken). The search stops at the
first scope where the job would fit; victims not needed for that placement
are then dropped, least preferred first. A search that finds nothing is
remembered until the next decision.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from .capacity import NOTHING, Capacity, Group, HostState, Pool, Release
from .fairshare import (
    UnitNode,
    UnitTree,
    gpu_amount,
    may_take_from,
    may_take_on_own_path,
    sides_at_common_ancestor,
)
from .model import (
    DOMAIN,
    RUNNING,
    WHOLE_GPU_MILLI,
    Policy,
    RunningJob,
    checkpoint_due,
    checkpoint_window,
    in_seq_order,
    protected_until,
    restart_overhead,
    shielded_until,
    waits_for_checkpoints,
)
from .placement import HostFilter, JobRequest, plan_across_groups, plan_in_group, pools_for, room
from .reservation import grace_for, grace_period_for


def lost_work(job: RunningJob, now: float, overhead: float = 0.0) -> float:
    """GPU-seconds a preemption loses: since the last checkpoint (or since start), plus `overhead` seconds of
    restart (what the job's next run holds its GPUs for before it makes progress again)."""
    gpus, since = work_line(job)
    return gpus * (max(0.0, now - since) + overhead)


def work_line(job: RunningJob) -> tuple[float, float]:
    """(GPUs, since): the work a running job would lose grows by its GPUs each second from `since`, its last
    checkpoint or its start (zero until then, if the checkpoint is still to come)."""
    since = job.start_time if job.last_checkpoint is None else max(job.start_time, job.last_checkpoint)
    return gpu_amount(len(job.gpu_ids), job.gpu_milli), since


def preemption_cost(job: RunningJob, now: float, policy: Policy) -> float:
    """Rule 4's cost of preempting a job: the work since its last periodic checkpoint plus its restart overhead
    (a job that is not resumable loses everything since its start and does not restart). A job whose declared
    next checkpoint falls within its grace period keeps its work: only the restart is lost."""
    overhead = restart_overhead(job, policy) if job.resumable else 0.0
    due = checkpoint_due(job, now, policy)
    if due is not None and due - now <= grace_for(job, policy):
        return gpu_amount(len(job.gpu_ids), job.gpu_milli) * overhead
    return lost_work(job, now, overhead)


@dataclass(eq=False, slots=True)
class Candidate:
    job: RunningJob
    # What it gives back on each schedulable host.
    parts: tuple[tuple[HostState, Release], ...]
    # Milli-GPU it gives back per GPU (for fractions).
    milli: dict[str, int]
    lost_work: float = 0.0
    taken: bool = False
    # Past its protection but still shielded by its earlier preemptions (`model.shield`): only a job that
    # needs a whole NVLink domain may take it.
    shielded: bool = False
    # Between its declared checkpoints, where taking it would lose more than waiting for the next one
    # (`model.checkpoint_window`), and whether it holds whole hosts: who may take it then is
    # `model.waits_for_checkpoints`'s. Set when a search first walks its block (`Victims._order`).
    between_checkpoints: bool = False
    whole_hosts: bool = False

    @classmethod
    def of(cls, job: RunningJob, capacity: Capacity, now: float, policy: Policy | None = None,
           cost: bool = True) -> Candidate:
        parts, milli, _ = run_facts(job, capacity)
        if not cost:
            return cls(job, parts, milli)
        return cls(job, parts, milli, lost_work(job, now) if policy is None else preemption_cost(job, now, policy))


class RunFacts(NamedTuple):
    """What a running job would give back if it were preempted, as rule 4's searches read it."""

    # What it gives back on each schedulable host.
    parts: tuple[tuple[HostState, Release], ...]
    # Milli-GPU it gives back per GPU (for fractions).
    milli: dict[str, int]
    # Does it hold every GPU of each schedulable host it is on (`Capacity.holds_whole_hosts`)?
    whole_hosts: bool


def run_facts(job: RunningJob, capacity: Capacity) -> RunFacts:
    """A running job's `RunFacts`, worked out once per run and kept by the capacity (`Capacity.memo`).

    All of it follows from the GPUs, CPUs and memory the run holds (which never change while it holds them) and
    from which hosts are schedulable and how many GPUs they have (which change only with a new `Capacity`), so
    the memo, dropped when the run's holdings are, stays right across ticks; nobody changes what it returns.
    """
    return capacity.memo(job, _derive_run_facts)


def _derive_run_facts(job: RunningJob, capacity: Capacity) -> RunFacts:
    releases = capacity.releases(job)
    shared = len(job.gpu_ids) == 1 and job.gpu_milli < WHOLE_GPU_MILLI
    milli = {gpu: job.gpu_milli if shared else WHOLE_GPU_MILLI
             for gpu in job.gpu_ids if capacity.gpu_host.get(gpu) in releases}
    parts = tuple((capacity.hosts[name], release) for name, release in releases.items())
    return RunFacts(parts, milli, capacity.holds_whole_hosts(job))


@dataclass(eq=False)
class Block:
    """The candidates of one project, allocated or not, in preference order once `ordered`."""

    unit: UnitNode
    allocated: bool
    candidates: list[Candidate] = field(default_factory=list)
    # Candidates not yet taken.
    live: int = 0
    # Are the candidates in preference order yet? (A block is ordered when a search first walks it.)
    ordered: bool = False


@dataclass(frozen=True)
class Victim:
    job: RunningJob
    # The two sides compared at the common ancestor (None: unallocated victim).
    sides: tuple[UnitNode, UnitNode] | None


@dataclass(frozen=True)
class VictimPlan:
    victims: tuple[Victim, ...]
    # Where the preemptor will start once they have left: (host, GPUs there).
    parts: tuple[tuple[HostState, int], ...]
    # GPUs each part's host gets back from the victims.
    released: dict[str, int]
    # A fraction: the GPU it will share once they have left.
    gpu: str | None = None


@dataclass(eq=False)
class _Outlook:
    """All a set of blocks could give back, per scope; kept up to date as victims are taken."""

    blocks: frozenset[int]
    host_reach: dict[HostState, int] = field(default_factory=dict)
    group_reach: dict[Group, int] = field(default_factory=dict)
    pool_reach: dict[Pool, int] = field(default_factory=dict)
    # What a job asked -> (free version at which nothing could be preempted for it, how many candidates that
    # search passed over for their checkpoints: a search that stops here passed them over too).
    hopeless: dict[tuple, tuple[int, int]] = field(default_factory=dict)
    # The most any host / group of each pool could offer (`reachable`), and the free version they were taken at.
    best: tuple[int, dict[Pool, int], dict[Pool, int]] | None = None

    def count(self, candidates: Iterable[Candidate], sign: int) -> None:
        """Add (sign +1) or take away (-1) what the candidates give back."""
        host_reach, group_reach, pool_reach = self.host_reach, self.group_reach, self.pool_reach
        for candidate in candidates:
            for host, release in candidate.parts:
                gpus = sign * release.gpus
                group = host.group
                pool = group.pool
                host_reach[host] = host_reach.get(host, 0) + gpus
                group_reach[group] = group_reach.get(group, 0) + gpus
                pool_reach[pool] = pool_reach.get(pool, 0) + gpus

    def widened(self, candidates: list[Candidate], blocks: frozenset[int]) -> _Outlook:
        """An outlook over `blocks`: what this one could give back, and what these candidates would (this one
        itself if it covers `blocks` already)."""
        if blocks == self.blocks:
            return self
        wider = _Outlook(blocks, dict(self.host_reach), dict(self.group_reach), dict(self.pool_reach))
        wider.count(candidates, +1)
        return wider

    def reachable(self, req: JobRequest, pools: set[Pool], free_version: int) -> bool:
        """Could `could_fit` hold for any candidate of these blocks? (False: it holds for none.)

        An upper bound on every candidate's `could_fit`: per pool, the most free plus reachable GPUs of any
        host and of any group the blocks free GPUs on, taken once per `free_version` (free GPUs only shrink
        while it stands, reach only shrinks as victims are taken).
        """
        best = self.best
        if best is None or best[0] != free_version:
            host_best: dict[Pool, int] = {}
            group_best: dict[Pool, int] = {}
            for host, reach in self.host_reach.items():
                pool = host.group.pool
                most = len(host.free) + reach
                if most > host_best.get(pool, -1):
                    host_best[pool] = most
            for group, reach in self.group_reach.items():
                pool = group.pool
                most = group.free + reach
                if most > group_best.get(pool, -1):
                    group_best[pool] = most
            best = self.best = (free_version, host_best, group_best)
        _, host_best, group_best = best
        need = req.gpus
        for pool in pools:
            if req.single_host(pool):
                most = host_best.get(pool)
                if most is not None and most >= need:
                    return True
                continue
            most = group_best.get(pool)
            if most is not None and most >= need:
                return True
            if (req.topology != DOMAIN and need > pool.largest_group and pool in self.pool_reach
                    and pool.free + self.pool_reach[pool] >= need):
                return True
        return False

    def could_fit(self, candidate: Candidate, req: JobRequest, pools: set[Pool]) -> bool:
        """Could the job fit at all where this candidate frees GPUs? (free plus all reachable; no shape or CPU)"""
        need = req.gpus
        for host, _ in candidate.parts:
            group = host.group
            pool = group.pool
            if pool not in pools:
                continue
            if req.single_host(pool):
                if len(host.free) + self.host_reach[host] >= need:
                    return True
            elif group.free + self.group_reach[group] >= need:
                return True
            elif (req.topology != DOMAIN and need > pool.largest_group
                  and pool.free + self.pool_reach[pool] >= need):
                return True
        return False


class Victims:
    """The running jobs rule 4 may preempt this tick, in preference order."""

    def __init__(self, running: tuple[RunningJob, ...], tree: UnitTree, capacity: Capacity,
                 leaving: set[str], now: float, policy: Policy, ends: dict | None = None):
        # `ends`: job id -> (job, protected until, shielded until) as a kept state has them (`run_ends`).
        ends = ends or {}
        self.capacity = capacity
        self.now = now
        self.policy = policy
        blocks: dict[tuple[bool, str], Block] = {}
        self._where: dict[str, tuple[Block, Candidate]] = {}
        for job in in_seq_order(running):
            # A MIG instance frees no whole GPU and no fraction; MIG jobs don't preempt either.
            if job.state != RUNNING or job.mig_profile or job.id in leaving:
                continue
            allocated = job.min_runtime > 0
            if allocated:
                known = ends.get(job.id)
                if known is None or known[0] is not job:
                    known = (job, protected_until(job, policy), shielded_until(job, policy))
                if now < known[1]:
                    continue
            # What it frees is kept per run (`run_facts`); what a preemption would cost, and whether it is between
            # its declared checkpoints, are reckoned when a search first walks the block (`_order`).
            parts, milli, whole_hosts = run_facts(job, capacity)
            if not parts:
                continue
            candidate = Candidate(job, parts, milli)
            if allocated:
                candidate.shielded = now < known[2]
                candidate.whole_hosts = whole_hosts
            block = blocks.get((allocated, job.project))
            if block is None:
                block = blocks[(allocated, job.project)] = Block(tree.nodes[job.project], allocated)
            block.candidates.append(candidate)
            block.live += 1
            self._where[job.id] = (block, candidate)

        def block_order(block: Block) -> tuple:
            # The ratios at the start of the tick: no charge has been made yet.
            if block.allocated:
                return (1, -block.unit.ratio, block.unit.name)
            return (0, -block.unit.unallocated_usage, block.unit.name)

        self.blocks = sorted(blocks.values(), key=block_order)
        self._unallocated_signature = frozenset(id(block) for block in self.blocks if not block.allocated)
        # Candidates not yet taken.
        self.live = len(self._where)
        # Bumped when ratios move (charges) and when capacity or candidates do (starts, victims).
        self._ratios_version = 0
        # How many times searches passed over a job only because it was between its declared checkpoints
        # (`quiet.py`, and the reasons of the jobs that waited for it).
        self.passed_over = 0
        # The jobs passed over so (`quiet.py`: only their windows opening can change what a search finds).
        self.passed_over_jobs: set[str] = set()
        # Bumped when free GPUs may have come back (with every capacity change, and when a claim is dropped).
        self._free_version = 0
        self._eligible: dict[tuple[str, float], tuple[int, list, frozenset[int]]] = {}
        # Gainer -> id of each allocated block of another project -> the sides compared there (`_sides_of`).
        self._sides: dict[str, dict[int, tuple[UnitNode, UnitNode]]] = {}
        # (Gainer, scope) -> the blocks it may be compared with (`_comparable`).
        self._comparables: dict[tuple[str, str | None], tuple[list, list]] = {}
        # Outlooks by the set of blocks they cover (gainers alike share one).
        self._outlooks: dict[frozenset[int], _Outlook] = {}
        # (Fast-lane sides, GPU types) -> the pools a job asking so may use (`_pools`).
        self._pool_sets: dict[tuple, set[Pool]] = {}

    def _order(self, block: Block) -> None:
        """Put a block's candidates in preference order (see the module docstring), and mark those of an allocated
        block between their declared checkpoints (only a search reads that, once it walks the block)."""
        now, policy = self.now, self.policy
        for candidate in block.candidates:
            candidate.lost_work = preemption_cost(candidate.job, now, policy)
        if block.allocated:
            # Only allocated jobs wait for their checkpoints, with an allocated job's grace period.
            grace = grace_period_for(True, policy)
            for candidate in block.candidates:
                candidate.between_checkpoints = checkpoint_window(candidate.job, now, grace, policy) > now
        block.candidates.sort(key=lambda c: (not c.job.resumable, c.lost_work,
                                             len(c.job.gpu_ids), c.job.seq, c.job.id))
        block.ordered = True

    def ratios_changed(self) -> None:
        self._ratios_version += 1

    def capacity_changed(self) -> None:
        self._free_version += 1

    def free_changed(self) -> None:
        """GPUs came back to the free lists (a claim dropped) without a capacity change counted."""
        self._free_version += 1

    def take(self, job_ids: set[str]) -> None:
        """Victims chosen (or jobs moved) this tick are no longer candidates."""
        for job_id in sorted(job_ids):
            found = self._where.get(job_id)
            if found is not None and not found[1].taken:
                block, candidate = found
                candidate.taken = True
                block.live -= 1
                for outlook in self._outlooks.values():
                    if id(block) in outlook.blocks:
                        outlook.count((candidate,), -1)
                self.live -= 1
        self.capacity_changed()

    def find(self, req: JobRequest, gainer: UnitNode, charge: float, host_ok: HostFilter,
             within: UnitNode | None = None, whole_domain: bool = False, one_host: bool = False) -> VictimPlan | None:
        """The victims whose GPUs would let the job start, or None.

        Only candidates freeing GPUs where the job could fit at all are tried
        (an upper bound kept per set of blocks the gainer may take from). A
        search that finds nothing is remembered until the next decision, so
        jobs like it then cost a lookup. `one_host`: the job fits on one host
        (who waits for victims' checkpoints: `model.waits_for_checkpoints`).
        """
        pools = self._pools(req)
        eligible, outlook = self._outlook(gainer, charge, within, whole_domain)
        # Fractions and jobs with earmarks skip the upper bound (it counts neither).
        bounded = not (req.shared or req.earmarked)
        hopeless_key = (req.gpus, req.per_host, req.topology, req.cpus, req.memory_gib, req.lanes, req.gpu_types,
                        req.protected_for, whole_domain, one_host)
        if bounded:
            known = outlook.hopeless.get(hopeless_key)
            if known is not None and known[0] == self._free_version:
                self.passed_over += known[1]
                return None
            if not outlook.reachable(req, pools, self._free_version):
                # No candidate could fit: the walk below would add none, and end as hopeless.
                outlook.hopeless[hopeless_key] = (self._free_version, 0)
                return None
        search = self._search(req, host_ok)
        passed_over = self.passed_over
        for block, sides in eligible:
            if not block.live:
                continue
            if not block.ordered:
                self._order(block)
            for candidate in block.candidates:
                if (candidate.taken or candidate.shielded and not whole_domain
                        or bounded and not outlook.could_fit(candidate, req, search.pools)):
                    continue
                if candidate.between_checkpoints and waits_for_checkpoints(one_host, whole_domain,
                                                                           candidate.whole_hosts):
                    self.passed_over += 1
                    self.passed_over_jobs.add(candidate.job.id)
                    continue
                scope = search.add(candidate, sides)
                if scope is not None:
                    return search.plan(scope)
        scope = search.across_domains()
        if scope is None:
            if bounded:
                outlook.hopeless[hopeless_key] = (self._free_version, self.passed_over - passed_over)
            return None
        return search.plan(scope)

    def could_reach(self, req: JobRequest, gainer: UnitNode, charge: float) -> bool:
        """Could any search for this job find victims, whatever scope and clause of rule 4b it keeps to? False
        only where the upper bound `find` starts with (`_Outlook.reachable`) holds for none of the blocks a job
        of `gainer` charging `charge` may take from; a fraction or a job holding a claim skip that bound."""
        if req.shared or req.earmarked:
            return True
        _, outlook = self._outlook(gainer, charge, None, whole_domain=True)
        return outlook.reachable(req, self._pools(req), self._free_version)

    def after(self, req: JobRequest, leaving: list[RunningJob], host_ok: HostFilter) -> VictimPlan | None:
        """Where a job will start once the jobs preempted for it have left (None: it no longer fits)."""
        search = self._search(req, host_ok)
        for job in leaving:
            scope = search.add(Candidate.of(job, self.capacity, 0.0), None)
            if scope is not None:
                return search.plan(scope, prune=False)
        scope = search.across_domains()
        return None if scope is None else search.plan(scope, prune=False)

    def _search(self, req: JobRequest, host_ok: HostFilter) -> _Search:
        return _Search(req, self.capacity, self._pools(req), host_ok)

    def _pools(self, req: JobRequest) -> set[Pool]:
        """The pools the job may use (`pools_for`), as a set shared by the searches of jobs alike (not to be
        changed)."""
        key = (req.lanes, req.gpu_types)
        pools = self._pool_sets.get(key)
        if pools is None:
            pools = self._pool_sets[key] = {p for lane in pools_for(req, self.capacity) for p in lane}
        return pools

    def _sides_of(self, gainer: UnitNode) -> dict[int, tuple[UnitNode, UnitNode]]:
        """Id of each allocated block the gainer is compared with -> the two sides at their common ancestor
        (none for its own project's); the tree's shape holds for the whole tick, so once per gainer."""
        known = self._sides.get(gainer.name)
        if known is None:
            known = self._sides[gainer.name] = {}
            for block in self.blocks:
                if block.allocated:
                    sides = sides_at_common_ancestor(gainer, block.unit)
                    if sides is not None:
                        known[id(block)] = sides
        return known

    def _comparable(self, gainer: UnitNode, within: UnitNode | None
                    ) -> tuple[list[tuple[Block, None]], list[tuple[Block, tuple[UnitNode, UnitNode]]]]:
        """The unallocated blocks, and the allocated blocks rule 4b compares a job of `gainer` with (with
        `within`, only those of units under it), each with the two sides compared, in the blocks' order.

        Neither the blocks, their order nor the tree's shape changes during the tick (only ratios do, and they
        are compared by the caller), so once per gainer and scope."""
        key = (gainer.name, None if within is None else within.name)
        known = self._comparables.get(key)
        if known is None:
            sides_of = self._sides_of(gainer)
            unallocated: list[tuple[Block, None]] = []
            compared: list[tuple[Block, tuple[UnitNode, UnitNode]]] = []
            for block in self.blocks:
                if not block.allocated:
                    unallocated.append((block, None))
                    continue
                if within is not None and within not in block.unit.path:
                    continue
                sides = sides_of.get(id(block))
                if sides is not None:  # None: its own project's, which rule 4b never lets it take
                    compared.append((block, sides))
            known = self._comparables[key] = (unallocated, compared)
        return known

    def _outlook(self, gainer: UnitNode, charge: float, within: UnitNode | None,
                 whole_domain: bool = False) -> tuple[list[tuple[Block, tuple | None]], _Outlook]:
        """The blocks the gainer may take from (rule 4), with the sides compared, and what they could give.

        With `within`, allocated jobs only of units under it (see `Cycle._preemption_scope`).
        """
        key = (gainer.name, charge, None if within is None else within.name, whole_domain)
        cached = self._eligible.get(key)
        if cached is None or cached[0] != self._ratios_version:
            unallocated, compared = self._comparable(gainer, within)
            eligible = list(unallocated)
            # Blocks only rule 4b's second clause opens come after all the others (`may_take_on_own_path`).
            second = []
            # Blocks compared on the same side of the loser compare alike: what the clauses said, by that side.
            said: dict[UnitNode, tuple[bool, tuple[UnitNode, UnitNode] | None]] = {}
            for block, sides_there in compared:
                known = said.get(sides_there[1])
                if known is None:
                    first = may_take_from(gainer, block.unit, charge, sides_there) is not None
                    known = said[sides_there[1]] = (first, None if first or not whole_domain else
                                                    may_take_on_own_path(gainer, block.unit, charge, sides_there))
                if known[0]:
                    eligible.append((block, sides_there))
                elif known[1] is not None:
                    second.append((block, known[1]))
            eligible += second
            cached = self._eligible[key] = (
                self._ratios_version, eligible, frozenset(id(block) for block, _ in eligible))
        _, eligible, signature = cached
        outlook = self._outlooks.get(signature)
        if outlook is None:
            # Every gainer may take from every unallocated block (they come first): what those give back is
            # counted once, and each set of blocks starts from a copy of it.
            unallocated = self._unallocated_outlook()
            outlook = self._outlooks[signature] = unallocated.widened(
                [candidate for block, _ in eligible if block.allocated
                 for candidate in block.candidates if not candidate.taken], signature)
        return eligible, outlook

    def _unallocated_outlook(self) -> _Outlook:
        """What the unallocated blocks could give back (kept up to date by `take` like every outlook)."""
        signature = self._unallocated_signature
        outlook = self._outlooks.get(signature)
        if outlook is None:
            outlook = self._outlooks[signature] = _Outlook(signature)
            outlook.count([candidate for block in self.blocks if not block.allocated
                           for candidate in block.candidates if not candidate.taken], +1)
        return outlook


# A scope: ("host", HostState) | ("gpu", gpu id) | ("group", Group) | ("pool", Pool)
Scope = tuple[str, object]


class _Search:
    """One victim search: what the chosen candidates would free, per scope."""

    def __init__(self, req: JobRequest, capacity: Capacity, pools: set[Pool], host_ok: HostFilter):
        self.req = req
        self.capacity = capacity
        self.pools = pools
        self.host_ok = host_ok
        self.chosen: list[tuple[Candidate, tuple[UnitNode, UnitNode] | None]] = []
        self.extra: dict[str, Release] = {}
        self.milli: dict[str, int] = {}
        self.touched: set[Pool] = set()

    def usable(self, host: HostState) -> bool:
        return host.group is not None and host.group.pool in self.pools and self.host_ok(host)

    def add(self, candidate: Candidate, sides) -> Scope | None:
        parts = [(host, release) for host, release in candidate.parts if self.usable(host)]
        if not parts:
            return None
        self.chosen.append((candidate, sides))
        extra = self.extra
        for host, release in parts:
            extra[host.name] = extra.get(host.name, NOTHING) + release
            self.touched.add(host.group.pool)
        for gpu, milli in candidate.milli.items():
            self.milli[gpu] = self.milli.get(gpu, 0) + milli
        for host, _ in parts:
            for scope in self._scopes(host, candidate):
                if self._fits(scope):
                    return scope
        return None

    def _scopes(self, host: HostState, candidate: Candidate) -> list[Scope]:
        if self.req.shared:
            # The GPU a fraction's claim holds on this host first: its plan stays there while it still fits.
            gpus = list(host.earmarked.get(self.req.job_id, ())) if self.req.earmarked else []
            gpus += [gpu for gpu in sorted(candidate.milli) if self.capacity.gpu_host.get(gpu) == host.name
                     and gpu not in gpus]
            return [("gpu", gpu) for gpu in gpus]
        if self.req.single_host(host.group.pool):
            return [("host", host)]
        return [("group", host.group)]

    def _fits(self, scope: Scope, without: Candidate | None = None) -> bool:
        if without is None:
            return self._fits_with(scope, None)
        # Try without one candidate: take its release out in place, then put it back.
        touched = [(h.name, r) for h, r in without.parts if h.name in self.extra]
        for name, release in touched:
            self.extra[name] = self.extra[name] - release
        try:
            return self._fits_with(scope, without)
        finally:
            for name, release in touched:
                self.extra[name] = self.extra[name] + release

    def _fits_with(self, scope: Scope, without: Candidate | None) -> bool:
        kind, where = scope
        req = self.req
        extra = self.extra
        if kind == "host":
            return room(where, req, extra.get(where.name, NOTHING)) >= req.gpus
        if kind == "gpu":
            host = self.capacity.hosts[self.capacity.gpu_host[where]]
            freed = self.milli.get(where, 0) - (without.milli.get(where, 0) if without is not None else 0)
            used = host.milli_used_for(req.job_id, where)  # what its own claim holds there is its own (rule 4)
            if used is None:
                used = 0 if where in host.free else WHOLE_GPU_MILLI
            if WHOLE_GPU_MILLI - used + freed < req.milli:
                return False
            here = extra.get(host.name, NOTHING)
            return room(host, req, Release(1, here.cpus, here.memory_gib)) >= 1
        if kind == "group":
            freed = 0
            for host in where.hosts:
                release = extra.get(host.name)
                if release is not None:
                    freed += release.gpus
                if req.earmarked:
                    freed += len(host.earmarked.get(req.job_id, ()))
            if where.free + freed < req.gpus:
                return False
            return plan_in_group(where, req, req.gpus, self.usable, extra) is not None
        return plan_across_groups(list(where.groups.values()), req, self.usable, extra) is not None

    def across_domains(self) -> Scope | None:
        """For `any`/`preferred` jobs larger than any domain: all the victims of one pool together.

        A job that one domain could hold preempts only within one domain.
        """
        if self.req.topology == DOMAIN or self.req.shared:
            return None
        for pool in sorted(self.touched, key=lambda p: (p.gpu_type, p.fast_lane)):
            if self.req.gpus > pool.largest_group and self._fits(("pool", pool)):
                return ("pool", pool)
        return None

    def _in_scope(self, candidate: Candidate, scope: Scope) -> bool:
        kind, where = scope
        if kind == "gpu":
            # A fraction's GPU, and the CPUs and memory of its host: every candidate there may count
            # (`_fits_with` reads the host's whole release); `plan` drops those not needed.
            if where in candidate.milli:
                return True
            where = self.capacity.hosts[self.capacity.gpu_host[where]]
            kind = "host"
        for host, _ in candidate.parts:
            if self.usable(host) and (
                (kind == "host" and host is where)
                or (kind == "group" and host.group is where)
                or (kind == "pool" and host.group.pool is where)
            ):
                return True
        return False

    def plan(self, scope: Scope, *, prune: bool = True) -> VictimPlan:
        """Keep the victims of the scope; drop, least preferred first, any not needed."""
        kept = [(c, sides) for c, sides in self.chosen if self._in_scope(c, scope)]
        for candidate, sides in reversed(list(kept)) if prune else ():
            if self._fits(scope, without=candidate):
                kept.remove((candidate, sides))
                for host, release in candidate.parts:
                    if host.name in self.extra:
                        self.extra[host.name] = self.extra[host.name] - release
                for gpu, milli in candidate.milli.items():
                    self.milli[gpu] -= milli
        released = {name: release.gpus for name, release in self.extra.items()}
        gpu = scope[1] if scope[0] == "gpu" else None
        return VictimPlan(tuple(Victim(c.job, sides) for c, sides in kept), self._parts(scope), released, gpu)

    def _parts(self, scope: Scope) -> tuple[tuple[HostState, int], ...]:
        kind, where = scope
        if kind == "host":
            return ((where, self.req.gpus),)
        if kind == "gpu":
            return ((self.capacity.hosts[self.capacity.gpu_host[where]], 1),)
        if kind == "group":
            parts = plan_in_group(where, self.req, self.req.gpus, self.usable, self.extra)
        else:
            parts = plan_across_groups(list(where.groups.values()), self.req, self.usable, self.extra)
        return tuple(sorted(parts, key=lambda p: p[0].name))

