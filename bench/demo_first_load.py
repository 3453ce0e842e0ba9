"""What the demo shows on its first page load: `manage.py demo` on a fresh database, the first ticks of
`make run`'s workload, then the numbers the pages show (usage ratios, the queue's estimates) and a what-if.

    .venv/bin/python bench/demo_first_load.py

Uses a temporary SQLite database; prints how long seeding and the what-if took.
"""

import os
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="allot-demo-"))
    os.environ["DATABASE_URL"] = f"sqlite:///{workdir}/demo.sqlite3"
    os.environ.setdefault("DEBUG", "1")
    os.environ["ALLOT_VAR_DIR"] = str(workdir)
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.utils import timezone

    from budgets.models import Unit
    from budgets.services import budget_request_create
    from operations.selectors import budget_tree
    from operations.whatif import what_if
    from scheduler.core.reasons import format_percent
    from scheduler.demo_load import DemoLoad
    from scheduler.models import Job
    from scheduler.tick import run_tick
    from topology.models import Cluster

    call_command("migrate", "--no-input", verbosity=0)
    began = time.monotonic()
    call_command("demo", verbosity=0)
    print(f"manage.py demo (with the week of history): {time.monotonic() - began:.1f} s; "
          f"{Job.objects.count()} jobs written")
    cluster = Cluster.objects.get(name="gb200-east")
    load = DemoLoad(faults=True)
    for _ in range(3):  # make run's first 15 seconds
        load.step()
        run_tick(cluster)
    now = timezone.now()
    rows = {row.unit.name: row for row in budget_tree(cluster, now=now)}
    print("usage ratios:", ", ".join(
        f"{name} {format_percent(row.usage_gpu_hours / row.entitled_gpu_hours)}"
        for name, row in rows.items() if row.entitled_gpu_hours))
    pending = Job.objects.filter(cluster=cluster, state="pending")
    print(f"running {Job.objects.filter(cluster=cluster, state='running').count()}, pending {pending.count()} "
          f"({pending.exclude(estimated_start=None).count()} with an estimated start)")
    ask = budget_request_create(user=get_user_model().objects.get(username="alice"),
                                unit=Unit.objects.get(name="olmo"), cluster=cluster, share=70,
                                justification="bench: the what-if on the demo's first page load")
    began = time.monotonic()
    assumptions, results = what_if(ask, share=Decimal(70), now=timezone.now())
    print(f"what-if olmo 55 % → 70 %: {time.monotonic() - began:.1f} s, "
          f"{assumptions['arrivals']['replayed']} arrivals replayed")
    for row in results["units"]:
        print(f"  {row['unit']}: usage ratio {format_percent(row['without']['usage_ratio'] or 0)} without, "
              f"{format_percent(row['with']['usage_ratio'] or 0)} with")
    return 0


if __name__ == "__main__":
    sys.exit(main())
