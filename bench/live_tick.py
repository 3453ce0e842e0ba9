"""The whole live tick — snapshot from the database, core decision, atomic apply — at demo and 4k-GPU scale.

    .venv/bin/python bench/live_tick.py [--database-url URL] [--racks N] [--jobs N] [--ticks N] [--json]

Builds a fresh database (a temporary SQLite file unless --database-url names
a PostgreSQL database, which is emptied), loads the demo cluster and org, and
a cluster of GB200 NVL72 racks (56 by default: 4,032 GPUs; `--racks 228
--jobs 12000`: 16,416 GPUs, issue 15's size) from a generated spec, submits a
queue through the same service as the API, lets a few ticks settle, then
reports the median of the measured ticks as recorded in their Tick rows (and
the worst), and of each phase: "before" is what the tick does ahead of its snapshot (heartbeats,
simulated runs that end, reconciliation). At 16k GPUs on PostgreSQL it prints
issue 15's target beside the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

BIG_CLUSTER = {
    "name": "gb200-big",
    "policy": {"executor": "simulated", "fast_lane_gpus": 32},
    "domains": [
        {"name": "rack-{:02d}", "count": 56, "hosts": 18, "gpus_per_host": 4, "gpu_type": "GB200",
         "cpus_per_host": 144, "memory_gib_per_host": 900},
    ],
    "unhealthy_hosts": ["rack-03-h07", "rack-11-h02", "rack-40-h18"],
}
# Issue 15 (DESIGN §6): the whole tick at 16k GPUs on PostgreSQL.
TARGET_GPUS, TARGET_SECONDS = 16_384, 0.5
SHAPES = [(1, "any", 600), (4, "any", 3600), (8, "any", 7200), (16, "domain", 4 * 3600), (32, "domain", 4 * 3600),
          (64, "domain", 8 * 3600), (4, "any", 0), (8, "any", 0)]


def setup_django(database_url: str | None) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="allot-live-tick-"))
    os.environ["DATABASE_URL"] = database_url or f"sqlite:///{workdir}/bench.sqlite3"
    os.environ.setdefault("DEBUG", "1")
    os.environ["ALLOT_VAR_DIR"] = str(workdir)
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    import django

    django.setup()


def big_cluster(racks: int) -> dict:
    """The generated cluster: `racks` NVL72 racks of 18 hosts × 4 GPUs, three hosts unhealthy."""
    spec = {**BIG_CLUSTER, "domains": [{**BIG_CLUSTER["domains"][0], "count": racks}]}
    spec["unhealthy_hosts"] = [name for name in BIG_CLUSTER["unhealthy_hosts"] if int(name[5:7]) <= racks]
    return spec


def prepare(jobs: int, seed: int, racks: int) -> None:
    import yaml
    from django.core.management import call_command

    from budgets.loaders import load_org_file
    from budgets.models import Membership
    from scheduler.services import JobRequest, job_submit
    from topology.loaders import load_cluster_file

    call_command("flush", "--no-input", verbosity=0)
    call_command("migrate", "--no-input", verbosity=0)
    load_cluster_file(REPO / "demo" / "cluster.yaml")
    spec = Path(os.environ["ALLOT_VAR_DIR"]) / "big.yaml"
    spec.write_text(yaml.safe_dump(big_cluster(racks)))
    load_cluster_file(spec)
    org = yaml.safe_load((REPO / "demo" / "org.yaml").read_text())
    for unit in org["units"]:
        unit["share"]["gb200-big"] = unit["share"]["gb200-east"]
        for child in unit.get("children", []):
            child["share"]["gb200-big"] = child["share"]["gb200-east"]
    (Path(os.environ["ALLOT_VAR_DIR"]) / "org.yaml").write_text(yaml.safe_dump(org))
    load_org_file(Path(os.environ["ALLOT_VAR_DIR"]) / "org.yaml")

    members = list(Membership.objects.filter(role="member").select_related("user", "unit").order_by("pk"))
    rng = random.Random(seed)
    for cluster, count in (("gb200-east", max(50, jobs // 20)), ("gb200-big", jobs)):
        for _ in range(count):
            member = rng.choice(members)
            gpus, topology, min_runtime = rng.choice(SHAPES)
            job_submit(user=member.user, request=JobRequest(
                cluster=cluster, project=member.unit.name, gpus=gpus, topology=topology, min_runtime=min_runtime,
                resumable=True, command="python train.py", simulated_duration=rng.randint(1800, 8 * 3600),
            ))


def measure(cluster_name: str, ticks: int, settle: int) -> dict:
    from datetime import timedelta

    from django.utils import timezone

    from scheduler.models import Tick
    from scheduler.tick import run_tick
    from topology.models import Cluster

    cluster = Cluster.objects.get(name=cluster_name)
    now = timezone.now()
    for step in range(settle + ticks):
        run_tick(cluster, now=now + timedelta(seconds=5 * step))
    rows = list(Tick.objects.filter(cluster=cluster).order_by("started_at")[settle:])
    median = lambda field: round(statistics.median(getattr(row, field) for row in rows), 4)  # noqa: E731
    return {
        "cluster": cluster_name,
        "gpus": cluster.gpu_counts()["total"],
        "pending": rows[-1].pending,
        "running": rows[-1].running,
        "tick_seconds": median("duration"),
        "worst_tick_seconds": round(max(row.duration for row in rows), 4),
        "snapshot_seconds": median("snapshot_seconds"),
        "decide_seconds": median("decide_seconds"),
        "apply_seconds": median("apply_seconds"),
        "before_seconds": round(statistics.median(
            row.duration - row.snapshot_seconds - row.decide_seconds - row.apply_seconds for row in rows), 4),
        "started_per_tick": round(statistics.mean(row.started for row in rows), 1),
        "ticks": len(rows),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="postgres://... (emptied!) ; default: a temporary SQLite file")
    parser.add_argument("--racks", type=int, default=56, help="NVL72 racks of the generated cluster (72 GPUs each)")
    parser.add_argument("--jobs", type=int, default=3000, help="jobs queued on the generated cluster")
    parser.add_argument("--ticks", type=int, default=10)
    parser.add_argument("--settle", type=int, default=5)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    setup_django(args.database_url)
    from django.db import connection

    if not 1 <= args.racks <= 999:
        parser.error(f"--racks must be between 1 and 999, not {args.racks}")
    prepare(args.jobs, args.seed, args.racks)
    results = [measure(name, args.ticks, args.settle) for name in ("gb200-east", "gb200-big")]
    if args.json:
        print(json.dumps({"database": connection.vendor, "results": results}, indent=2))
        return 0
    print(f"Whole live tick on {connection.vendor} (median of {args.ticks} ticks after {args.settle} to settle):")
    header = ["cluster", "GPUs", "pending", "running", "tick s", "worst s", "before s", "snapshot s", "decide s",
              "apply s", "starts/tick"]
    print("  ".join(f"{h:>11}" for h in header))
    for r in results:
        row = [r[key] for key in ("cluster", "gpus", "pending", "running", "tick_seconds", "worst_tick_seconds",
                                  "before_seconds", "snapshot_seconds", "decide_seconds", "apply_seconds",
                                  "started_per_tick")]
        print("  ".join(f"{v:>11}" for v in row))
    for r in results:
        if r["gpus"] >= TARGET_GPUS and connection.vendor == "postgresql":
            verdict = "met" if r["tick_seconds"] <= TARGET_SECONDS else "NOT met"
            print(f"{r['cluster']}: whole tick {r['tick_seconds']} s (median) at {r['gpus']:,} GPUs; "
                  f"target ≤ {TARGET_SECONDS} s (issue 15): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
