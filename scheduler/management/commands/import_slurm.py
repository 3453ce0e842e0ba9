"""`manage.py import_slurm`: a lab's Slurm accounts and job history as Allot's org file, workload and usage.

    sacctmgr show associations --parsable2 > associations.txt
    sacct --parsable2 --allocations --allusers --starttime 2026-11-01 --endtime 2026-12-01 \\
        --format=JobID,User,Account,AllocTRES,Submit,Start,End,TimelimitRaw,State > jobs.txt
    python manage.py import_slurm --associations associations.txt --jobs jobs.txt --cluster gb200-east --out lab/
    python manage.py simulate --cluster cluster.yaml --org lab/org.yaml --workload lab/workload.csv

Writes org.yaml (FORMATS.md), workload.csv (FORMATS.md's columns), usage.csv (each job's GPUs from start to
end: the lab's usage history) and problems.txt (every line it could not map, and why); the parsing is in
scheduler/slurm.py. Nothing is written to the database: load the org with `load_org` when it looks right.
"""

import csv
from pathlib import Path

import yaml
from django.core.management.base import BaseCommand, CommandError

from scheduler.slurm import USAGE_COLUMNS, WORKLOAD_COLUMNS, import_slurm


class Command(BaseCommand):
    help = "Turn sacctmgr associations and sacct allocations (--parsable2) into org.yaml, workload.csv, usage.csv."

    def add_arguments(self, parser):
        parser.add_argument("--associations", required=True, help="`sacctmgr show associations --parsable2` output")
        parser.add_argument("--jobs", help="`sacct --parsable2 --allocations` output (see the module's docstring)")
        parser.add_argument("--cluster", required=True, help="the Allot cluster the shares are for (its name)")
        parser.add_argument("--slurm-cluster", help="which Slurm cluster's associations to import (default: the "
                            "only one)")
        parser.add_argument("--min-runtime", type=int, default=3600,
                            help="seconds of minimum runtime every imported job gets, at most its time limit "
                                 "(Slurm has none; 0 makes every job unallocated). Default 3600")
        parser.add_argument("--not-resumable", action="store_true",
                            help="mark jobs not resumable (default: resumable, as requeueable Slurm jobs are)")
        parser.add_argument("--gpu-type-map", default="", metavar="GRES=TYPE,...",
                            help="Slurm gres GPU names → the cluster's GPU types, e.g. h100=H100,gb200=GB200; a "
                                 "typed request with no entry is imported as any GPU (and reported)")
        parser.add_argument("--out", default="slurm-import", help="output directory (default ./slurm-import)")

    def handle(self, *args, associations, jobs, cluster, slurm_cluster, min_runtime, not_resumable, gpu_type_map,
               out, **options):
        if min_runtime < 0:
            raise CommandError("--min-runtime must be 0 or more seconds")
        gpu_types = {}
        for entry in filter(None, (part.strip() for part in gpu_type_map.split(","))):
            gres, _, allot_type = entry.partition("=")
            if not gres or not allot_type:
                raise CommandError(f"--gpu-type-map: {entry!r} is not GRES=TYPE")
            gpu_types[gres.strip()] = allot_type.strip()
        try:
            associations_text = Path(associations).read_text(encoding="utf-8", errors="replace")
            jobs_text = Path(jobs).read_text(encoding="utf-8", errors="replace") if jobs else None
        except OSError as error:
            raise CommandError(f"cannot read {error.filename}: {error.strerror}") from None
        result = import_slurm(associations_text, jobs_text, cluster=cluster, slurm_cluster=slurm_cluster,
                              min_runtime=min_runtime, resumable=not not_resumable, gpu_types=gpu_types)
        if not result.org["units"]:
            raise CommandError("\n".join(["no account could be imported", *map(str, result.problems)]))
        directory = Path(out)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "org.yaml").write_text(
            "# Imported from Slurm by `manage.py import_slurm`: accounts → units, fairshare → shares (percent of\n"
            "# the parent), users → members. Check it, then `manage.py load_org` it.\n"
            + yaml.safe_dump(result.org, sort_keys=False, allow_unicode=True))
        self._csv(directory / "workload.csv", WORKLOAD_COLUMNS, result.workload)
        self._csv(directory / "usage.csv", USAGE_COLUMNS, result.usage)
        (directory / "problems.txt").write_text("".join(f"{problem}\n" for problem in result.problems))
        gpu_hours = sum(row["gpu_hours"] for row in result.usage)
        self.stdout.write(
            f"{len(result.projects)} accounts → units, {len(result.org['users'])} users, {len(result.workload)} jobs "
            f"({gpu_hours:.1f} GPU-hours) written to {directory}/; {len(result.problems)} lines not mapped "
            f"(problems.txt)")
        for problem in result.problems:
            self.stderr.write(f"  {problem}")

    @staticmethod
    def _csv(path: Path, columns: list[str], rows: list[dict]) -> None:
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
