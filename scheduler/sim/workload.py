"""The workload CSV of FORMATS.md: one row per job, read and checked whole.

Every problem names its row (data rows count from 1, the header is line 1 of
the file) and its column, as the API names the field: a user fixing a
50,000-row file needs to know where to look. Pure: no Django.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from scheduler.core import jobspec
from scheduler.core.durations import format_duration
from scheduler.core.jobspec import BOOL, CHOICE, INT, PRIORITIES, SECONDS
from scheduler.core.model import ANY, PRIORITY_NORMAL, WHOLE_GPU_MILLI

# The columns, their order, defaults and bounds are the job table's (scheduler/core/jobspec.py).
COLUMNS = jobspec.WORKLOAD_COLUMNS
REQUIRED = tuple(column for column in COLUMNS if jobspec.BY_COLUMN[column].required)
OPTIONAL = tuple(column for column in COLUMNS if column not in REQUIRED)
PRIORITY_NAMES = {value: name for name, value in PRIORITIES.items()}
TRUE = {"1", "true", "yes"}
FALSE = {"0", "false", "no"}


class WorkloadError(ValueError):
    """A workload refused whole; `problems` lists each row and column at fault (at most 50 shown)."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        shown = problems[:50]
        more = f"; and {len(problems) - 50} more" if len(problems) > 50 else ""
        super().__init__("; ".join(shown) + more)


@dataclass(frozen=True)
class SimJob:
    """One job of a workload. Times are seconds from the start of the simulation."""

    id: str
    submit: float
    project: str
    gpus: int
    min_runtime: float
    resumable: bool
    # Seconds of work the job needs to finish.
    duration: float
    user: str = ""
    gpus_per_host: int | None = None
    gpu_milli: int = WHOLE_GPU_MILLI
    gpu_types: frozenset[str] = frozenset()
    topology: str = ANY
    # Seconds between checkpoints; None: resumes exactly where it stopped.
    checkpoint_every: float | None = None
    priority: int = PRIORITY_NORMAL
    cpus: int = 0
    memory_gib: int = 0
    max_runtime: float | None = None
    # Seconds it holds its GPUs after each restart before it makes progress again; None: the cluster
    # policy's `restart_overhead`.
    restart_overhead: float | None = None
    # Stable tie-breaker: the row number (jobs made in code number themselves).
    seq: int = 0

    @property
    def allocated(self) -> bool:
        return self.min_runtime > 0


# The job table's fields SimJob takes by name, as the file gives them and the model stores them.
AS_IS = jobspec.as_is(SimJob)


@dataclass
class _Row:
    number: int
    values: dict[str, str]
    problems: list[str] = field(default_factory=list)

    def where(self, column: str) -> str:
        job = self.values.get("job_id") or "?"
        return f"row {self.number} (line {self.number + 1}, job {job}), column {column}"

    def text(self, column: str) -> str:
        return (self.values.get(column) or "").strip()

    def number_of(self, column: str, *, minimum: float = 0, positive: bool = False, maximum: float | None = None,
                  default=None):
        raw = self.text(column)
        if raw == "":
            if default is not None or column not in REQUIRED:
                return default
            self.problems.append(f"{self.where(column)}: required")
            return None
        try:
            value = float(raw)
        except ValueError:
            self.problems.append(f"{self.where(column)}: {raw!r} is not a number of seconds")
            return None
        if not math.isfinite(value) or value < minimum or (positive and value <= 0):
            limit = "more than 0" if positive else f"at least {minimum:g}"
            self.problems.append(f"{self.where(column)}: {raw} must be {limit}")
            return None
        if maximum is not None and value > maximum:
            self.problems.append(f"{self.where(column)}: {raw} must be at most {maximum} (seconds; "
                                 f"{format_duration(maximum)})")
            return None
        return int(value) if value == int(value) else value

    def whole(self, column: str, *, minimum: int = 0, maximum: int | None = None, default=None) -> int | None:
        raw = self.text(column)
        if raw == "":
            if column in REQUIRED:
                self.problems.append(f"{self.where(column)}: required")
            return default
        try:
            value = int(raw)
        except ValueError:
            self.problems.append(f"{self.where(column)}: {raw!r} is not a whole number")
            return None
        if value < minimum or (maximum is not None and value > maximum):
            limit = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
            self.problems.append(f"{self.where(column)}: {value} must be {limit}")
            return None
        return value


def parse_workload(rows: Iterable[dict[str, str]], *, fieldnames: Iterable[str] | None = None) -> list[SimJob]:
    """Check rows (dicts keyed by column) and return the jobs in row order; raise WorkloadError."""
    problems: list[str] = []
    if fieldnames is not None:
        names = [name.strip() for name in fieldnames if name is not None]
        missing = [name for name in REQUIRED if name not in names]
        unknown = [name for name in names if name not in COLUMNS]
        if missing:
            problems.append(f"header: missing required column(s) {', '.join(missing)}")
        if unknown:
            problems.append(f"header: unknown column(s) {', '.join(unknown)} (known: {', '.join(COLUMNS)})")
        if problems:
            raise WorkloadError(problems)
    jobs: list[SimJob] = []
    seen: dict[str, int] = {}
    for number, values in enumerate(rows, 1):
        values = {(k or "").strip(): v for k, v in values.items()}
        row = _Row(number, values)
        job = _job(row)
        job_id = row.text("job_id")
        if job_id:
            if job_id in seen:
                row.problems.append(f"{row.where('job_id')}: {job_id!r} is also the id of row {seen[job_id]}")
            seen.setdefault(job_id, number)
        problems += row.problems
        if job is not None and not row.problems:
            jobs.append(job)
    if problems:
        raise WorkloadError(problems)
    return jobs


def _value(row: _Row, spec: jobspec.JobField):
    """A column's value, checked against the field's kind and bounds; its default when it is empty."""
    column = spec.column
    default = None if spec.required else spec.default
    if spec.kind == INT:
        minimum = spec.column_minimum if spec.column_minimum is not None else spec.minimum
        return row.whole(column, minimum=minimum or 0, maximum=spec.maximum, default=default)
    if spec.kind == SECONDS:
        return row.number_of(column, minimum=spec.minimum or 0, positive=spec.positive, maximum=spec.maximum,
                             default=default)
    text = row.text(column)
    if spec.kind == BOOL:
        if text.lower() in TRUE:
            return True
        if text.lower() in FALSE:
            return False
        if text or spec.required:
            row.problems.append(f"{row.where(column)}: {text!r} must be 1/0 or true/false")
        return default
    if spec.kind == CHOICE:
        text = text or default
        if text not in spec.values:
            row.problems.append(f"{row.where(column)}: {text!r} must be one of {', '.join(spec.values)}")
        return text
    if not text and spec.required:
        row.problems.append(f"{row.where(column)}: required")
    return text or default


def _job(row: _Row) -> SimJob | None:
    values = {spec.name: _value(row, spec) for spec in (jobspec.BY_COLUMN[column] for column in COLUMNS)}
    gpus, milli, per_host = values["gpus"], values["gpu_milli"], values["gpus_per_host"]
    if gpus is not None and milli is not None and milli < WHOLE_GPU_MILLI and gpus != 1:
        row.problems.append(f"{row.where('gpu_milli')}: a fraction of a GPU ({milli}) is for 1-GPU jobs only")
    if gpus is not None and per_host is not None and gpus and gpus % per_host:
        row.problems.append(f"{row.where('gpus_per_host')}: {gpus} GPUs is not a multiple of {per_host} per host")
    if gpus == 0 and not (values["cpus"] or values["memory_gib"]):
        row.problems.append(f"{row.where('gpus')}: a job with no GPUs must ask for cpus or memory_gib")
    if row.problems:
        return None
    return SimJob(
        id=values["job_id"], submit=values["submit"], project=values["project"], duration=values["duration"],
        user=values["user"] or values["project"],
        gpu_types=frozenset(t.strip() for t in (values["gpu_type"] or "").split("|") if t.strip()),
        priority=PRIORITIES[values["priority"]], seq=row.number, **{name: values[name] for name in AS_IS},
    )


def read_workload(path: str | Path) -> list[SimJob]:
    """Read and check a workload CSV file."""
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            return _read(handle, str(path))
    except OSError as error:
        raise WorkloadError([f"{path}: cannot read ({error.strerror})"]) from None


def parse_workload_text(text: str) -> list[SimJob]:
    return _read(io.StringIO(text), "workload")


def _read(handle, name: str) -> list[SimJob]:
    reader = csv.DictReader(handle)
    if reader.fieldnames is None:
        raise WorkloadError([f"{name}: empty file (expected a header with {', '.join(REQUIRED)})"])
    return parse_workload(reader, fieldnames=reader.fieldnames)


def _seconds(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if value == int(value) else repr(float(value))


def _column_text(spec: jobspec.JobField, value) -> str:
    """A value as the file writes it: empty for the field's default (but for a required column)."""
    if value is None or (not spec.required and value == spec.default):
        return ""
    if spec.kind == SECONDS:
        return _seconds(value)
    if spec.kind == BOOL:
        return "1" if value else "0"
    return str(value)


def workload_rows(jobs: Iterable[SimJob]) -> list[list[str]]:
    """The CSV rows (header first) of jobs, the way `write_workload` writes them."""
    rows = [list(COLUMNS)]
    for job in jobs:
        values = {
            "job_id": job.id, "submit": job.submit, "project": job.project, "duration": job.duration,
            "user": job.user if job.user != job.project else None,
            "gpu_type": "|".join(sorted(job.gpu_types)), "priority": PRIORITY_NAMES[job.priority],
            **{name: getattr(job, name) for name in AS_IS},
        }
        rows.append([_column_text(jobspec.BY_COLUMN[column], values[jobspec.BY_COLUMN[column].name])
                     for column in COLUMNS])
    return rows


def write_workload(path: str | Path, jobs: Iterable[SimJob]) -> None:
    """Write jobs as a workload CSV; columns no job uses are left out."""
    rows = workload_rows(jobs)
    used = [i for i, column in enumerate(rows[0]) if column in REQUIRED or any(row[i] for row in rows[1:])]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        for row in rows:
            writer.writerow([row[i] for i in used])
