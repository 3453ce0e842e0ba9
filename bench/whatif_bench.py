"""The budget what-if on a heavy week: every arrival and every pending job replayed, three 7-day simulations.

    .venv/bin/python bench/whatif_bench.py [--jobs N] [--seed N] [--json]

Builds a fresh database (a temporary SQLite file), loads the demo cluster
(348 GPUs) and org, and writes a generated week into it: N submissions over
the last 7 days from the org's members (1 to 32 GPUs, 10 minutes to 12 hours,
a third unallocated, in bursts), each placed on the GPUs that come free first,
so that at the end some have finished, some run and the rest wait. Then one
manager's budget request is what-iffed as the request page does it, and the
time of reading the database (inputs) and of the three simulations is printed.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SHAPES = [(1, 0.30), (2, 0.15), (4, 0.2), (8, 0.2), (16, 0.1), (32, 0.05)]
MIN_RUNTIMES = [0, 0, 600, 1800, 3600, 2 * 3600, 4 * 3600]


def setup_django() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="allot-whatif-"))
    os.environ["DATABASE_URL"] = f"sqlite:///{workdir}/bench.sqlite3"
    os.environ.setdefault("DEBUG", "1")
    os.environ["ALLOT_VAR_DIR"] = str(workdir)
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    import django

    django.setup()


def load_demo() -> None:
    """The demo cluster and org, their shares in force from now on (take the what-if's `now` after this)."""
    from django.core.management import call_command

    from budgets.loaders import load_org_file
    from topology.loaders import load_cluster_file

    call_command("migrate", "--no-input", verbosity=0)
    load_cluster_file(REPO / "demo" / "cluster.yaml")
    load_org_file(REPO / "demo" / "org.yaml")


def heavy_week(jobs: int, seed: int, now) -> dict:
    """Write `jobs` submissions of the week before `now`; returns how many ended, run and wait."""
    from datetime import timedelta

    from budgets.models import Membership
    from scheduler.choices import JobState
    from scheduler.models import GpuAssignment, Job
    from topology.choices import GpuHealth, HostState
    from topology.models import Cluster, Gpu

    cluster = Cluster.objects.get(name="gb200-east")
    gpus = list(Gpu.objects.filter(host__domain__cluster=cluster, health=GpuHealth.OK, host__state=HostState.UP)
                .order_by("host__name", "index"))
    members = list(Membership.objects.filter(role="member", unit__children__isnull=True)
                   .select_related("user", "unit").order_by("pk"))
    rng = random.Random(seed)
    week = 7 * 86400
    # Bursts: half the submissions in six 4-hour bursts, the rest spread over the week.
    bursts = [rng.uniform(0, week - 4 * 3600) for _ in range(6)]
    offsets = sorted(rng.choice(bursts) + rng.uniform(0, 4 * 3600) if rng.random() < 0.5 else rng.uniform(0, week)
                     for _ in range(jobs))
    free = [(0.0, n) for n in range(len(gpus))]  # (free from, GPU index), a heap
    start_of_week = now - timedelta(seconds=week)
    rows, runs = [], []
    for offset in offsets:
        member = rng.choice(members)
        count = rng.choices([g for g, _ in SHAPES], weights=[w for _, w in SHAPES])[0]
        duration = min(12 * 3600, max(600, rng.lognormvariate(9.0, 1.0)))
        taken = [heapq.heappop(free) for _ in range(count)]
        start = max(offset, max(at for at, _ in taken))
        end = start + duration
        if start >= week:
            state, start_at, end_at = JobState.PENDING, None, None
            for item in taken:
                heapq.heappush(free, item)
        else:
            state = JobState.COMPLETED if end <= week else JobState.RUNNING
            start_at = start_of_week + timedelta(seconds=start)
            end_at = start_of_week + timedelta(seconds=end) if end <= week else None
            for _, n in taken:
                heapq.heappush(free, (end, n))
            runs.append((len(rows), [gpus[n] for _, n in taken], start_at, end_at))
        rows.append(Job(
            cluster=cluster, project=member.unit, user=member.user, gpus=count, min_runtime=rng.choice(MIN_RUNTIMES),
            resumable=True, command="python train.py", state=state,
            submitted_at=start_of_week + timedelta(seconds=offset), started_at=start_at, run_started_at=start_at,
            ended_at=end_at, simulated_duration=int(duration),
        ))
    created = Job.objects.bulk_create(rows, batch_size=500)
    GpuAssignment.objects.bulk_create([
        GpuAssignment(job=created[index], gpu=gpu, milli=1000, assigned_at=start_at, released_at=end_at)
        for index, held, start_at, end_at in runs for gpu in held
    ], batch_size=1000)
    return {state: sum(1 for row in rows if row.state == state)
            for state in (JobState.COMPLETED, JobState.RUNNING, JobState.PENDING)}


def measure(jobs: int, seed: int, profile: bool = False) -> dict:
    from datetime import timedelta
    from decimal import Decimal

    from django.utils import timezone

    from budgets.models import Membership, Unit
    from budgets.services import budget_request_create
    from operations.whatif import build_inputs, simulate_both
    from topology.models import Cluster

    load_demo()
    # After loading: the shares are in force from the moment they were loaded, and the what-if reads those in
    # force at `now` (taken before, every unit would have none, and both sides would replay the same week).
    now = timezone.now().replace(microsecond=0) + timedelta(seconds=1)
    counts = heavy_week(jobs, seed, now)
    unit = Unit.objects.get(name="olmo")
    asker = Membership.objects.filter(unit=unit).select_related("user").first().user
    request = budget_request_create(user=asker, unit=unit, cluster=Cluster.objects.get(name="gb200-east"),
                                    share=Decimal(70), justification="bench", now=now)
    began = time.perf_counter()
    inputs = build_inputs(request, share=Decimal(70), now=now)
    read = time.perf_counter() - began
    if any(unit.share is None for unit in inputs.without):
        raise SystemExit("the demo org's shares are not in force at the what-if's now: the sides would not differ")
    if profile:
        import cProfile
        import pstats

        with cProfile.Profile() as profiler:
            simulate_both(inputs, control=False)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
    began = time.perf_counter()
    results = simulate_both(inputs)
    simulated = time.perf_counter() - began
    arrivals = inputs.assumptions["arrivals"]
    return {
        "jobs": jobs, "finished": counts["completed"], "running": counts["running"], "pending": counts["pending"],
        "replayed_arrivals": arrivals["replayed"], "simulated_pending": inputs.assumptions["pending_jobs"],
        "inputs_seconds": round(read, 2), "simulations_seconds": round(simulated, 2),
        "total_seconds": round(read + simulated, 2), "units": len(results.get("units", [])),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3126, help="submissions in the week (default: the heavy week)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--profile", action="store_true", help="first profile one run of both sides")
    args = parser.parse_args()
    setup_django()
    result = measure(args.jobs, args.seed, args.profile)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"Budget what-if on a heavy week ({result['jobs']} submissions: {result['finished']} finished, "
          f"{result['running']} running, {result['pending']} waiting at the start):")
    print(f"  replayed {result['replayed_arrivals']} arrivals and {result['simulated_pending']} pending jobs "
          f"(nothing thinned); inputs {result['inputs_seconds']} s, three 7-day simulations "
          f"{result['simulations_seconds']} s, total {result['total_seconds']} s (target ≤ 5 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
