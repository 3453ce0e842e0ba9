"""`make bench`: every benchmark, one section after another, then a summary of what passed.

    .venv/bin/python bench/run_all.py [--quick] [--only NAME ...]

1. tick: bench/tick_bench.py, the core's decision at 1k, 4k, 16k and 64k GPUs (16k with --quick).
2. live tick: bench/live_tick.py, the whole tick (snapshot, decide, apply) on a database; and at 16k GPUs
   on PostgreSQL when ALLOT_BENCH_DATABASE_URL names a database it may empty.
3. openb: bench/openb_pack.py --all --quick, the FGD packing reproduction (reads the openb trace).
4. nvl72: bench/nvl72_optimum.py, placement against the CP-SAT optimum on NVL72 racks.
5. sim: bench/sim_table.py, the simulator's evaluation table (workloads × policies).
6. load: bench/load.py, gunicorn under 2,000 hosts' heartbeats, researchers and submissions.
7. failover: bench/failover.py, the scheduler leader killed and a standby's take-over time,
   with `manage.py run_scheduler` and again with Celery beat and workers.
8. what-if: bench/whatif_bench.py, the budget what-if on a heavy week, nothing thinned.
9. static: bench/static_size.py, the compressed size of a chart page (the cluster page and every script
   and stylesheet it loads) as WhiteNoise serves it after collectstatic.

`--quick` shortens each (fewer ticks, instances, rounds; 20 s of load). Every
section runs even when one before it failed; the exit code is the worst.
The load and failover sections need PostgreSQL on 127.0.0.1:5432 (load falls
back to SQLite) and start a Redis of their own when `redis-server` is installed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def sections(quick: bool) -> list[tuple[str, str, list[str]]]:
    """(name, title, arguments after the interpreter)."""
    return [
        ("static", "chart page size (compressed)", ["bench/static_size.py"]),
        ("tick", "tick (core decision)",
         ["bench/tick_bench.py", *(["--runs", "2"] if quick else ["--sizes", "1024,4096,16384,65536", "--runs", "3"])]),
        ("live-tick", "live tick (database)",
         ["bench/live_tick.py", *(["--jobs", "1000", "--ticks", "3", "--settle", "2"] if quick else [])]),
        *([("live-tick-16k", "live tick at 16k GPUs (PostgreSQL)",
            ["bench/live_tick.py", "--database-url", os.environ["ALLOT_BENCH_DATABASE_URL"], "--racks", "228",
             "--jobs", "12000", "--ticks", "5", "--settle", "3"])]
          if os.environ.get("ALLOT_BENCH_DATABASE_URL") and not quick else []),
        ("openb", "openb packing (FGD)", ["bench/openb_pack.py", "--all", "--quick"]),
        ("nvl72", "NVL72 placement vs optimum",
         ["bench/nvl72_optimum.py", *(["--instances", "4", "--time-limit", "5"] if quick else [])]),
        ("sim", "simulator evaluation", ["bench/sim_table.py", *(["--quick"] if quick else [])]),
        ("load", "load (gunicorn, 2,000 hosts)", ["bench/load.py", *(["--quick"] if quick else [])]),
        ("failover", "failover (run_scheduler)", ["bench/failover.py", *(["--rounds", "3"] if quick else [])]),
        ("failover-celery", "failover (Celery)",
         ["bench/failover.py", "--mode", "celery", *(["--rounds", "3"] if quick else [])]),
        ("what-if", "budget what-if (heavy week)", ["bench/whatif_bench.py", *(["--jobs", "1000"] if quick else [])]),
    ]


def run(title: str, command: list[str]) -> tuple[int, float]:
    print(f"\n=== {title}: {' '.join(command)}", flush=True)
    began = time.perf_counter()
    code = subprocess.call([sys.executable, *command], cwd=BENCH.parent)
    took = time.perf_counter() - began
    print(f"=== {title}: {'ok' if code == 0 else f'exit {code}'} in {took:.0f} s", flush=True)
    return code, took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs of every section")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only these sections (names as in the list)")
    args = parser.parse_args(argv)
    chosen = [s for s in sections(args.quick) if not args.only or s[0] in args.only]
    unknown = set(args.only or ()) - {s[0] for s in sections(args.quick)}
    if unknown:
        parser.error(f"no section named {', '.join(sorted(unknown))}")
    outcomes = []
    for name, title, command in chosen:
        if not (BENCH.parent / command[0]).exists():
            print(f"\n=== {title}: {command[0]} is not there; skipped", flush=True)
            continue
        outcomes.append((name, *run(title, command)))
    print("\n=== summary")
    for name, code, took in outcomes:
        print(f"  {name:<16} {'ok' if code == 0 else f'exit {code}':<8} {took:6.0f} s")
    return max((code for _, code, _ in outcomes), default=0)


if __name__ == "__main__":
    sys.exit(main())
