"""A job's shape, once: every field a job is submitted with, and every column of the workload file.

One row per field: the kind of value, its bounds, its default, its column in the workload CSV, its label on
the Submit page and its `allot submit` option. The API's serializer, the submit service, the model's
constraints, the Submit page, the workload reader and writer, the CLI, the snapshot and the what-if read this
table instead of restating fields and bounds (CONTRIBUTING.md, "Add a job field"). Pure: no Django.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields

from .durations import format_duration
from .mig import PROFILES as MIG_PROFILES
from .model import (
    ANY,
    DOMAIN,
    MAX_RESTART_OVERHEAD,
    PREFERRED,
    PRIORITY_HIGH,
    PRIORITY_LOW,
    PRIORITY_NORMAL,
    WHOLE_GPU_MILLI,
)

# Kinds of value.
INT = "int"  # a whole number
# A duration: whole seconds in the API and the model, any number of seconds in the workload file, typed as
# people type durations (`2h30m`, `90` minutes, `02:30:00`) on the command line and the Submit page.
SECONDS = "seconds"
BOOL = "bool"
CHOICE = "choice"  # one of `choices`
TEXT = "text"
NAME = "name"  # the name of a cluster or a project, which the server looks up
MAP = "map"  # NAME → VALUE text (the job's environment); empty by default


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = _Required()

# The longest duration a job may give (ten years): anything longer is a typo.
MAX_SECONDS = 10 * 365 * 86400
# The core's order of priorities (within a project), by the name a job gives.
PRIORITIES = {"low": PRIORITY_LOW, "normal": PRIORITY_NORMAL, "high": PRIORITY_HIGH}


@dataclass(frozen=True)
class JobField:
    """One field of a job, as every part of Allot that takes one sees it."""

    # The REST field, the Job model's field and, when `as_is`, the core's job classes' attribute.
    name: str
    kind: str
    # REQUIRED: it must be given; None: it may be left empty (`placeholder` and `help` say what that means).
    default: object = REQUIRED
    # A number's bounds, inclusive; `positive`: more than 0 (for whole seconds, at least 1).
    minimum: int | None = None
    maximum: int | None = None
    positive: bool = False
    # Text's longest (MAP: each value's).
    max_length: int | None = None
    # (value, label): a CHOICE's values; a TEXT field's values to offer (the service checks them and names them).
    choices: tuple[tuple[str, str], ...] = ()
    # TEXT: lines and tabs allowed (a command).
    multiline: bool = False
    # TEXT kept exactly as given (a command, a path): not trimmed, its characters checked by its own rules.
    verbatim: bool = False
    # The Policy field an empty value takes (the cluster's own).
    from_policy: str = ""
    # Given with POST /api/v1/jobs/ and stored on the Job (False: a column of the workload file only).
    api: bool = True
    # The core's job classes (PendingJob, RunningJob) and the simulator's SimJob take it under `name`, with the
    # value the model stores: the snapshot, the what-if and the simulator pass it on without naming it.
    as_is: bool = False
    # The workload CSV's column ("": none); a required field's column is a required column.
    column: str = ""
    # Where the workload file takes less than a submission (0 GPUs: a CPU-only job).
    column_minimum: int | None = None
    # The Submit page: label ("": not on it), words beside it, the empty input's placeholder.
    label: str = ""
    hint: str = ""
    placeholder: str = ""
    # `allot submit`'s option strings (): not offered.
    cli: tuple[str, ...] = ()
    # What it is, for the API's schema and `allot submit --help`.
    help: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def nullable(self) -> bool:
        """It may be null (empty) in the API and the model."""
        return self.default is None and self.kind != MAP

    @property
    def lowest(self) -> int | None:
        """The least whole value it takes (a submission's: the API, the model, the CLI, the Submit page)."""
        return 1 if self.positive else self.minimum

    @property
    def values(self) -> tuple[str, ...]:
        return tuple(value for value, _ in self.choices)

    @property
    def annotation(self) -> str:
        """Its Python type, as an annotation."""
        base = {INT: "int", SECONDS: "int", BOOL: "bool", MAP: "dict[str, str]"}.get(self.kind, "str")
        return f"{base} | None" if self.nullable else base


_TOPOLOGIES = ((ANY, "any"), (DOMAIN, "one NVLink domain"), (PREFERRED, "one domain if possible"))

FIELDS: tuple[JobField, ...] = (
    JobField("job_id", TEXT, api=False, column="job_id", help="Unique in the file."),
    JobField("submit", SECONDS, minimum=0, api=False, column="submit",
             help="Seconds from the start of the simulation."),
    JobField("cluster", NAME, max_length=64, label="Cluster", placeholder="no cluster yet", cli=("--cluster",),
             help="The cluster's name."),
    JobField("project", NAME, max_length=64, column="project", label="Project", placeholder="you are in no project",
             cli=("--project",), help="The project charged (a unit with no children)."),
    JobField("user", TEXT, default=None, api=False, column="user", help="The submitter; empty: the project's name."),
    JobField("gpus", INT, minimum=1, maximum=1_000_000, column_minimum=0, as_is=True, column="gpus", label="GPUs",
             cli=("--gpus",), help="GPUs in total (required; `allot submit`: 1 when --mig-profile is given)."),
    JobField("gpus_per_host", INT, default=None, minimum=1, maximum=1024, as_is=True, column="gpus_per_host",
             label="GPUs per host", placeholder="any", cli=("--gpus-per-host",),
             help="The shape of a multi-host job; empty: fill hosts."),
    JobField("gpu_type", TEXT, default="", max_length=200, column="gpu_type", label="GPU type",
             placeholder="any, or H100, GB200|H100", cli=("--gpu-type",),
             help="Allowed GPU types, |-separated (e.g. H100, or GB200|H100); empty: any."),
    JobField("gpu_milli", INT, default=WHOLE_GPU_MILLI, minimum=1, maximum=WHOLE_GPU_MILLI, as_is=True,
             column="gpu_milli", label="Fraction of a GPU (milli)", cli=("--gpu-milli",),
             help="A fraction of one GPU, 1..1000, for a 1-GPU job."),
    JobField("mig_profile", TEXT, default="", max_length=16, choices=tuple((name, name) for name in MIG_PROFILES),
             label="MIG instance", placeholder="none: whole GPUs", cli=("--mig-profile",),
             help=f"A MIG instance of this profile ({', '.join(MIG_PROFILES)}) on a GPU in MIG mode, instead of a "
                  "whole GPU or a fraction: 1-GPU jobs only, not with gpu_milli."),
    JobField("topology", CHOICE, default=ANY, choices=_TOPOLOGIES, as_is=True, column="topology", label="Topology",
             cli=("--topology",),
             help="any; domain: all its GPUs in one NVLink domain; preferred: one domain if possible."),
    JobField("min_runtime", SECONDS, minimum=0, maximum=MAX_SECONDS, as_is=True, column="min_runtime",
             label="Minimum runtime", hint="protected and charged for this long; 0: unallocated (free, "
             "preemptible). 90 (minutes), 2h30m, 02:30:00, 1-12:00:00", cli=("--min-runtime",),
             help="Protected (and charged) for this long; 0 = unallocated (free, preemptible at any time)."),
    JobField("max_runtime", SECONDS, default=None, positive=True, maximum=MAX_SECONDS, as_is=True,
             column="max_runtime", label="Maximum runtime", placeholder="none", cli=("--max-runtime", "--time", "-t"),
             help="At most this long (as sbatch --time); empty: no limit."),
    JobField("resumable", BOOL, as_is=True, column="resumable", label="Resumable",
             hint="requeue it when preempted (it checkpoints)", cli=("--resumable",),
             help="Requeued when preempted (it checkpoints); else a preemption stops it for good."),
    JobField("restart_overhead", SECONDS, default=None, minimum=0, maximum=MAX_RESTART_OVERHEAD,
             from_policy="restart_overhead", as_is=True, column="restart_overhead", label="Restart overhead",
             placeholder="the cluster's", cli=("--restart-overhead",),
             help=f"GPU time the job holds after each restart before it makes progress again (loading its "
                  f"checkpoint), 0 to {MAX_RESTART_OVERHEAD} seconds; empty: the cluster policy's restart_overhead "
                  "(default 300 s)."),
    JobField("duration", SECONDS, positive=True, api=False, column="duration",
             help="Seconds of work the job needs to finish."),
    JobField("checkpoint_every", SECONDS, default=None, positive=True, maximum=MAX_SECONDS, as_is=True,
             column="checkpoint_every", label="Checkpoint every", placeholder="not declared",
             hint="e.g. 30m: preempted for fair share only near a checkpoint, so it loses little work",
             cli=("--checkpoint-every",),
             help="Seconds of progress between the checkpoints the job saves (counted afresh from each one it "
                  "reports); the scheduler then preempts it for fair share only when it would lose no more than "
                  "the wait for its next one (at most 30 min): early in an interval, or in the grace period before a "
                  "checkpoint. "
                  "Empty: not declared (the simulator: it resumes exactly where it stopped)."),
    JobField("priority", CHOICE, default="normal", choices=tuple((name, name) for name in PRIORITIES),
             column="priority", label="Priority in the project", cli=("--priority",),
             help="Orders the project's own jobs only."),
    JobField("cpus", INT, default=0, minimum=0, maximum=1_000_000, as_is=True, column="cpus", label="CPUs",
             cli=("--cpus",), help="CPUs for the job, split evenly over its hosts; 0: not constrained."),
    JobField("memory_gib", INT, default=0, minimum=0, maximum=1_000_000_000, as_is=True, column="memory_gib",
             label="Memory (GiB)", cli=("--memory-gib",),
             help="Memory for the job in GiB, split evenly over its hosts; 0: not constrained."),
    JobField("name", TEXT, default="", max_length=200, label="Name", cli=("--name", "-J"), help="The job's name."),
    JobField("simulated_duration", SECONDS, default=None, positive=True, maximum=MAX_SECONDS,
             label="Simulated work", hint="simulated clusters only", placeholder="default",
             cli=("--simulated-duration",), help="Simulated clusters only: seconds of work the job needs."),
    JobField("command", TEXT, default="", max_length=20000, multiline=True, verbatim=True, label="Command",
             cli=("--",), help="The command each rank runs (`allot submit … -- COMMAND`)."),
    JobField("workdir", TEXT, default="", max_length=4096, verbatim=True, label="Directory on the hosts",
             hint="absolute", placeholder="your home directory", cli=("--chdir", "-D"),
             help="Absolute directory on the hosts the job starts in; empty: the account's home. `allot submit` "
                  "sends the directory it is run from."),
    JobField("env", MAP, default=None, max_length=32768, label="Environment", placeholder="NAME=VALUE, one a line",
             cli=("--env", "--export"),
             help="The job's own environment variables, NAME: VALUE (at most 256, 64 KiB in all); the agent adds "
                  "the account's HOME, USER, LOGNAME, SHELL and PATH, CUDA_VISIBLE_DEVICES and the torchrun and "
                  "ALLOT_* variables, which cannot be given here."),
)
FIELD: dict[str, JobField] = {spec.name: spec for spec in FIELDS}
# What POST /api/v1/jobs/ takes and the Job stores.
SUBMIT: tuple[JobField, ...] = tuple(spec for spec in FIELDS if spec.api)
# The workload file's columns in the order it is written: required ones first; a new column goes last.
WORKLOAD_COLUMNS = ("job_id", "submit", "project", "gpus", "min_runtime", "resumable", "duration", "user",
                    "gpus_per_host", "gpu_milli", "gpu_type", "topology", "checkpoint_every", "priority", "cpus",
                    "memory_gib", "max_runtime", "restart_overhead")
BY_COLUMN: dict[str, JobField] = {spec.column: spec for spec in FIELDS if spec.column}


def as_is(*classes) -> tuple[str, ...]:
    """The `as_is` fields that every one of `classes` (dataclasses: PendingJob, RunningJob, SimJob) has."""
    have = [{attribute.name for attribute in fields(cls)} for cls in classes]
    return tuple(spec.name for spec in FIELDS if spec.as_is and all(spec.name in names for names in have))


def problem(spec: JobField, value) -> str | None:
    """What is wrong with a submission's `value` for the field's kind and bounds, naming the limit (None: nothing).

    Rules between fields (a fraction of a GPU is for 1-GPU jobs) and those that need the cluster are the
    submit service's."""
    if value is None:
        return None if spec.default is None else "required"
    if spec.kind in (INT, SECONDS):
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be a whole number{' of seconds' if spec.kind == SECONDS else ''}; got {value!r}"
        if spec.lowest is not None and value < spec.lowest:
            return f"must be at least {_amount(spec, spec.lowest)}; got {value}"
        if spec.maximum is not None and value > spec.maximum:
            return f"must be at most {_amount(spec, spec.maximum)}; got {value}"
    elif spec.kind == BOOL:
        if not isinstance(value, bool):
            return f"must be true or false; got {value!r}"
    elif spec.kind == CHOICE:
        if value not in spec.values:
            return f"must be one of {', '.join(spec.values)}"
    elif spec.kind in (TEXT, NAME):
        if not isinstance(value, str):
            return "must be text"
        if spec.max_length is not None and len(value) > spec.max_length:
            return f"must be at most {spec.max_length} characters"
    return None


def _amount(spec: JobField, number: int) -> str:
    if spec.kind != SECONDS:
        return str(number)
    return f"{number} second{'s' if number != 1 else ''}" + (f" ({format_duration(number)})" if number >= 60 else "")


def in_words(spec: JobField, value) -> str:
    """A field's value as pages and the CLI print it."""
    if spec.kind == SECONDS:
        return format_duration(value)
    if spec.kind == BOOL:
        return "yes" if value else "no"
    return dict(spec.choices).get(value, str(value)) if spec.kind == CHOICE else str(value)


def also_asked(values: Mapping[str, object], *, shown: Collection[str]) -> list[tuple[str, str]]:
    """(label, value in words) of each field of a job (`values`: by field name) that a page or `allot show` does
    not show on its own (`shown`) and that is not its default: a new field appears without its own line."""
    asked = []
    for spec in SUBMIT:
        value = values.get(spec.name)
        if spec.name in shown or spec.kind == MAP or value in (None, "", spec.default):
            continue
        asked.append((spec.label or spec.name, in_words(spec, value)))
    return asked
