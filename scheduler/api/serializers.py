from django.core.validators import ProhibitNullCharactersValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import ProhibitSurrogateCharactersValidator

from scheduler.core import jobspec
from scheduler.core.model import hosts_of
from scheduler.models import Job, JobEvent
from scheduler.services import JobRequest

# Integers from agents end up in IntegerField (32-bit) and BigAutoField (64-bit) columns.
MAX_INT = 2**31 - 1
MAX_BIGINT = 2**63 - 1
# A heartbeat's lists, capped: a host has at most this many GPUs, events to tell and ranks.
MAX_GPUS = 1024
MAX_EVENTS = 1000
MAX_PROCESSES = 4096


def _submit_field(spec: jobspec.JobField) -> serializers.Field:
    """The API's field for one row of the job table: its kind, bounds and default (DRF's messages name the
    limit: "Ensure this value is greater than or equal to 1.")."""
    options = {"help_text": spec.help}
    if not spec.required:
        options["required"] = False
        if spec.nullable:
            options["allow_null"] = True
        else:
            options["default"] = dict if spec.kind == jobspec.MAP else spec.default
    if spec.kind in (jobspec.INT, jobspec.SECONDS):
        return serializers.IntegerField(min_value=spec.lowest, max_value=spec.maximum, **options)
    if spec.kind == jobspec.BOOL:
        return serializers.BooleanField(**options)
    if spec.kind == jobspec.CHOICE:
        return serializers.ChoiceField(choices=spec.choices, **options)
    if spec.kind == jobspec.MAP:
        child = serializers.CharField(allow_blank=True, trim_whitespace=False, max_length=spec.max_length)
        return serializers.DictField(child=child, **options)
    return serializers.CharField(max_length=spec.max_length, allow_blank=not spec.required,
                                 trim_whitespace=not spec.verbatim, **options)


JobSubmitSerializer = type("JobSubmitSerializer", (serializers.Serializer,), {
    "__doc__": "A submission: the job table's fields (scheduler/core/jobspec.py). Durations are seconds; minimum "
               "runtime 0 means unallocated (free, preemptible).",
    "__module__": __name__,
    **{spec.name: _submit_field(spec) for spec in jobspec.SUBMIT},
})


def job_request(data) -> JobRequest:
    """The one input boundary of a submission, for the API and the Submit page: `data` checked by
    JobSubmitSerializer (its ValidationError, the API's 400 body, otherwise), as the service's JobRequest."""
    serializer = JobSubmitSerializer(data=data)
    serializer.is_valid(raise_exception=True)
    return JobRequest(**serializer.validated_data)


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["at", "kind", "detail", "cause", "actor"]


JOB_FIELDS = [
    "id", "name", "state", "cluster", "project", "user", "gpus", "gpus_per_host", "gpu_type", "gpu_milli",
    "mig_profile", "topology", "cpus", "memory_gib", "min_runtime", "resumable", "max_runtime", "priority",
    "restart_overhead", "allocation", "queue_position", "project_position", "pending_reason",
    "estimated_start", "gpu_ids", "hosts",
    "submitted_at", "started_at", "ended_at", "preemptions", "restarts", "exit_code", "stop_cause",
    "failure_reason", "command", "workdir", "env",
]
# Every other field of the job table (scheduler/core/jobspec.py) reads back as it was submitted.
JOB_FIELDS += [spec.name for spec in jobspec.SUBMIT if spec.name not in JOB_FIELDS]


class JobSerializer(serializers.ModelSerializer):
    """A job as FORMATS.md promises it; `estimated_start` is an estimate, never a promise."""

    cluster = serializers.CharField(source="cluster.name")
    project = serializers.CharField(source="project.name")
    user = serializers.CharField(source="user.username")
    allocation = serializers.CharField()
    project_position = serializers.SerializerMethodField()
    gpu_ids = serializers.SerializerMethodField()
    hosts = serializers.SerializerMethodField()
    submitted_at = serializers.DateTimeField()
    # `failed: <what failed>` for a failed rank (kept as two fields).
    stop_cause = serializers.CharField(source="shown_stop_cause", read_only=True)
    command = serializers.SerializerMethodField()
    workdir = serializers.SerializerMethodField()
    env = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = JOB_FIELDS

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_project_position(self, job):
        return self.context.get("project_positions", {}).get(job.pk)

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_gpu_ids(self, job):
        return self.context.get("gpu_ids", {}).get(job.pk, [])

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_hosts(self, job):
        return hosts_of(self.get_gpu_ids(job))

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_command(self, job):
        """Shown to the job's owner, managers of its project, on-call and admins."""
        return job.command if self._visible(job) else None

    def _visible(self, job) -> bool:
        visible = self.context.get("command_visible")
        return visible is None or visible(job)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_workdir(self, job):
        """Shown to those who see the command."""
        return job.workdir if self._visible(job) else None

    @extend_schema_field(serializers.DictField(child=serializers.CharField(), allow_null=True))
    def get_env(self, job):
        """The job's own variables (they may hold its secrets): shown to those who see the command."""
        return job.env if self._visible(job) else None


class JobDetailSerializer(JobSerializer):
    events = JobEventSerializer(many=True, read_only=True)
    output = serializers.SerializerMethodField()

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "events", "output"]

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_output(self, job):
        """The tail of each rank's output for the current (or last) run."""
        if not self.get_command(job):
            return []
        return [
            {"run": p.run, "rank": p.rank, "host": p.host.name, "state": p.state, "exit_code": p.exit_code,
             "error": p.error, "tail": p.output_tail}
            for p in job.processes.filter(run=job.restarts).select_related("host").order_by("rank")
        ]


class CancelSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class RawTextField(serializers.CharField):
    """Text from a host, taken as it comes (NUL, lone surrogates) and cleaned by scheduler/agents.py, not
    refused: one job's output must not cost its host a heartbeat."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.validators = [v for v in self.validators if not isinstance(
            v, ProhibitNullCharactersValidator | ProhibitSurrogateCharactersValidator)]


class AgentGpuSerializer(serializers.Serializer):
    index = serializers.IntegerField(min_value=0, max_value=MAX_GPUS)
    health = serializers.ChoiceField(choices=["ok", "failed"], default="ok")
    uuid = RawTextField(max_length=100, required=False, allow_blank=True)
    ecc_uncorrected_volatile = serializers.IntegerField(min_value=0, max_value=MAX_BIGINT, required=False,
                                                        allow_null=True)
    retired_pages_pending = serializers.BooleanField(required=False, allow_null=True)
    remapped_rows_pending = serializers.BooleanField(required=False, allow_null=True)


class AgentEventSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["xid", "nvml_error"])
    gpu = serializers.IntegerField(min_value=0, max_value=MAX_GPUS, required=False, allow_null=True)
    code = serializers.IntegerField(min_value=0, max_value=100000, required=False, allow_null=True)
    detail = RawTextField(max_length=500, required=False, allow_blank=True, default="")

    def validate(self, data):
        if data["kind"] == "xid" and data.get("code") is None:
            raise serializers.ValidationError({"code": ["required for an xid event"]})
        return data


class AgentProcessSerializer(serializers.Serializer):
    job = serializers.IntegerField(min_value=1, max_value=MAX_BIGINT)
    run = serializers.IntegerField(min_value=0, max_value=MAX_INT)
    rank = serializers.IntegerField(min_value=0, max_value=MAX_INT)
    state = serializers.ChoiceField(choices=["running", "exited"])
    pid = serializers.IntegerField(min_value=0, max_value=MAX_INT, required=False, allow_null=True)
    exit_code = serializers.IntegerField(min_value=-MAX_INT - 1, max_value=MAX_INT, required=False, allow_null=True)
    output_tail = RawTextField(required=False, allow_blank=True, allow_null=True, trim_whitespace=False,
                               max_length=64000)
    checkpoint_at = serializers.DateTimeField(required=False, allow_null=True)
    error = RawTextField(required=False, allow_blank=True, default="", max_length=2000)


class AgentFactsSerializer(serializers.Serializer):
    mode = serializers.ChoiceField(choices=["root", "single-user"])
    account = RawTextField(max_length=64, required=False, allow_blank=True, default="")
    uid = serializers.IntegerField(min_value=0, max_value=MAX_INT)
    containment = serializers.ChoiceField(choices=["v2", "v1", "none"])
    notes = RawTextField(max_length=1000, required=False, allow_blank=True, default="")


class HeartbeatSerializer(serializers.Serializer):
    """The heartbeat's envelope. Its entries (`gpus`, `events`, `processes`) are checked one by one
    (`checked_entries`): a bad one is refused by name, the others are applied."""

    host = serializers.CharField(max_length=96)
    address = serializers.CharField(max_length=255, required=False, allow_blank=True, default="")
    gpus = serializers.ListField(child=serializers.JSONField(), required=False, default=list, max_length=MAX_GPUS,
                                 help_text="[{index, health, uuid?, ecc_uncorrected_volatile?, retired_pages_pending?, "
                                           "remapped_rows_pending?}]")
    events = serializers.ListField(child=serializers.JSONField(), required=False, default=list,
                                   max_length=MAX_EVENTS, help_text="[{kind: xid|nvml_error, gpu?, code?, detail?}]")
    processes = serializers.ListField(child=serializers.JSONField(), required=False, default=list,
                                      max_length=MAX_PROCESSES,
                                      help_text="[{job, run, rank, state, pid?, exit_code?, output_tail?, "
                                                "checkpoint_at?, error?}]")
    agent = serializers.JSONField(required=False, default=None,
                                  help_text="{mode: root|single-user, account, uid, containment: v2|v1|none, notes}")


ENTRY_SERIALIZERS = {"gpus": AgentGpuSerializer, "events": AgentEventSerializer,
                     "processes": AgentProcessSerializer}


def checked_entries(data: dict) -> tuple[dict[str, list], list[dict]]:
    """Each entry of the heartbeat's lists on its own: (the valid ones by list, the refused ones named:
    `{"entry": "processes[3]", "job": 12, "errors": {"pid": ["…"]}}`). A GPU index given twice keeps the
    first."""
    valid: dict[str, list] = {name: [] for name in ENTRY_SERIALIZERS}
    refused: list[dict] = []
    for name, serializer_class in ENTRY_SERIALIZERS.items():
        seen = set()
        for position, entry in enumerate(data.get(name) or []):
            serializer = serializer_class(data=entry)
            if not isinstance(entry, dict):
                refused.append({"entry": f"{name}[{position}]", "errors": {"non_field_errors": ["must be an object"]}})
                continue
            if not serializer.is_valid():
                found = {key: entry.get(key) for key in ("job", "run", "rank", "index") if key in entry}
                refused.append({"entry": f"{name}[{position}]",
                                **{key: value for key, value in found.items() if isinstance(value, int)
                                   and abs(value) <= MAX_BIGINT},
                                "errors": {key: [str(message) for message in messages] for key, messages
                                           in serializer.errors.items()}})
                continue
            identity = serializer.validated_data.get("index") if name == "gpus" else None
            if identity is not None:
                if identity in seen:
                    continue
                seen.add(identity)
            valid[name].append(serializer.validated_data)
    agent = data.get("agent")
    facts = None
    if agent is not None:
        serializer = AgentFactsSerializer(data=agent)
        if serializer.is_valid():
            facts = dict(serializer.validated_data)
        else:
            refused.append({"entry": "agent", "errors": serializer.errors if isinstance(serializer.errors, dict)
                            else {"non_field_errors": ["must be an object"]}})
    valid["agent"] = facts
    return valid, refused
