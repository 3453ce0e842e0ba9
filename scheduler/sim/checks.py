"""Consistency of a simulation's files: what any reader of events.csv and jobs.csv may rely on.

`check_outputs(events, jobs)` takes the rows as read back from the files
(strings) and returns the problems found, none for a sound run:

- events are in time order; every job's life is well formed (submit first,
  a start only when pending, an end only after a start);
- no GPU is held by two jobs at once (milli-GPU on a shared GPU add up to at
  most 1000): a run holds its GPUs from `start` until its `finish`,
  `requeue`, `stop` or `fail` (a `preempt` starts the grace period only);
- every start has an end, or the job is running at the end;
- jobs.csv agrees: first start, end, state, wait (first start − submit) and
  preemptions (count of `preempt` events) are those the events give.

The tests run it on every simulation they make; the bench on every run.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path

ENDS = {"finish", "requeue", "stop", "fail"}
FINAL = {"finish": "completed", "stop": ("preempted", "failed"), "fail": "failed"}


def _time(text: str) -> float:
    return float(text)


def check_outputs(events: Iterable[dict], jobs: Iterable[dict], *, limit: int = 20) -> list[str]:
    problems: list[str] = []

    def problem(text: str) -> None:
        if len(problems) < limit:
            problems.append(text)

    held: dict[str, dict[str, int]] = {}  # GPU -> job -> milli
    holding: dict[str, list[tuple[str, int]]] = {}  # job -> its GPUs (gpu, milli) in the current run
    state: dict[str, str] = {}
    submitted: dict[str, float] = {}
    first_start: dict[str, float] = {}
    ended: dict[str, float] = {}
    last_event: dict[str, str] = {}
    preempts: dict[str, int] = {}
    previous = float("-inf")
    for number, row in enumerate(events, 1):
        when = _time(row["time"])
        job, event, detail = row["job_id"], row["event"], row.get("detail", "")
        if when < previous:
            problem(f"events row {number}: time {row['time']} goes back in time")
        previous = when
        current = state.get(job)
        last_event[job] = event
        if event == "submit":
            if current is not None:
                problem(f"events row {number}: job {job} submitted twice")
            state[job] = "pending"
            submitted[job] = when
        elif event == "start":
            if current != "pending":
                problem(f"events row {number}: job {job} starts while {current}")
            state[job] = "running"
            first_start.setdefault(job, when)
            gpus = []
            for item in detail.split():
                if item.startswith("host:"):
                    continue
                gpu, _, milli = item.partition("@")
                gpus.append((gpu, int(milli) if milli else 1000))
            for gpu, milli in gpus:
                holders = held.setdefault(gpu, {})
                if sum(holders.values()) + milli > 1000:
                    problem(f"events row {number}: GPU {gpu} given to job {job} while held by "
                            f"{', '.join(sorted(holders))}")
                holders[job] = holders.get(job, 0) + milli
            holding[job] = gpus
        elif event == "preempt":
            if current not in ("running", "preempting"):
                problem(f"events row {number}: job {job} preempted while {current}")
            state[job] = "preempting"
            preempts[job] = preempts.get(job, 0) + 1
        elif event in ENDS:
            if current not in ("running", "preempting"):
                problem(f"events row {number}: job {job} ends ({event}) while {current}")
            for gpu, milli in holding.pop(job, []):
                holders = held.get(gpu, {})
                holders[job] = holders.get(job, 0) - milli
                if holders.get(job, 0) <= 0:
                    holders.pop(job, None)
            if event == "requeue":
                state[job] = "pending"
            else:
                state[job] = "ended"
                ended[job] = when
        else:
            problem(f"events row {number}: unknown event {event!r}")

    seen = set()
    for number, row in enumerate(jobs, 1):
        job = row["job_id"]
        seen.add(job)
        where = f"jobs row {number} (job {job})"
        if job not in submitted:
            problem(f"{where}: no submit event")
            continue
        if _time(row["submit"]) != submitted[job]:
            problem(f"{where}: submit {row['submit']} but the submit event is at {submitted[job]:g}")
        start = first_start.get(job)
        if start is None and row["first_start"] or start is not None and (
                not row["first_start"] or _time(row["first_start"]) != start):
            problem(f"{where}: first_start {row['first_start']!r} but the first start event is at {start}")
        if start is not None and (not row["wait"] or abs(_time(row["wait"]) - (start - submitted[job])) > 2e-3):
            problem(f"{where}: wait {row['wait']} but start − submit = {start - submitted[job]:g}")
        if start is None and row["wait"]:
            problem(f"{where}: a wait but no start")
        if int(row["preemptions"]) != preempts.get(job, 0):
            problem(f"{where}: {row['preemptions']} preemptions but {preempts.get(job, 0)} preempt events")
        final = state.get(job)
        expected = {"pending": ("pending",), "running": ("running",), "preempting": ("running",)}.get(final)
        if final == "ended":
            kind = FINAL[last_event[job]]
            expected = kind if isinstance(kind, tuple) else (kind,)
            if not row["end"] or _time(row["end"]) != ended[job]:
                problem(f"{where}: end {row['end']!r} but the job ended at {ended[job]:g}")
        elif row["end"]:
            problem(f"{where}: an end but the job is still {final}")
        if expected and row["state"] not in expected:
            problem(f"{where}: state {row['state']} but the events say {' or '.join(expected)}")
    for job in submitted:
        if job not in seen:
            problem(f"job {job} has events but no row in jobs.csv")
    for job in holding:
        if state.get(job) not in ("running", "preempting"):
            problem(f"job {job} holds GPUs but is {state.get(job)}")
    return problems


def check_directory(directory: str | Path) -> list[str]:
    directory = Path(directory)
    with open(directory / "events.csv", newline="", encoding="utf-8") as events, \
            open(directory / "jobs.csv", newline="", encoding="utf-8") as jobs:
        return check_outputs(csv.DictReader(events), list(csv.DictReader(jobs)))


def check_result(result) -> list[str]:
    """The same checks on a result in memory, through the rows the files would hold."""
    from .output import JOB_COLUMNS, job_rows, number

    events = ({"time": number(t), "job_id": j, "event": e, "detail": d} for t, j, e, d in result.events)
    jobs = [dict(zip(JOB_COLUMNS, (str(v) for v in row), strict=True)) for row in job_rows(result)]
    return check_outputs(events, jobs)
