from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduler.choices import Priority, Topology
from scheduler.core.mig import PROFILES as MIG_PROFILES
from scheduler.models import Job, JobEvent

MAX_SECONDS = 10 * 365 * 86400


class JobSubmitSerializer(serializers.Serializer):
    """A submission. Durations are seconds; minimum runtime 0 means unallocated (free, preemptible)."""

    cluster = serializers.CharField(max_length=64)
    project = serializers.CharField(max_length=64)
    gpus = serializers.IntegerField(min_value=1, max_value=1_000_000)
    gpus_per_host = serializers.IntegerField(min_value=1, max_value=1024, required=False, allow_null=True)
    gpu_type = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    gpu_milli = serializers.IntegerField(min_value=1, max_value=1000, required=False, default=1000)
    topology = serializers.ChoiceField(choices=Topology.choices, required=False, default=Topology.ANY)
    min_runtime = serializers.IntegerField(min_value=0, max_value=MAX_SECONDS)
    resumable = serializers.BooleanField()
    max_runtime = serializers.IntegerField(min_value=1, max_value=MAX_SECONDS, required=False, allow_null=True)
    priority = serializers.ChoiceField(choices=Priority.choices, required=False, default=Priority.NORMAL)
    cpus = serializers.IntegerField(min_value=0, max_value=1_000_000, required=False, default=0)
    memory_gib = serializers.IntegerField(min_value=0, max_value=1_000_000_000, required=False, default=0)
    name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    command = serializers.CharField(
        max_length=20000, required=False, allow_blank=True, default="", trim_whitespace=False,
    )
    simulated_duration = serializers.IntegerField(
        min_value=1, max_value=MAX_SECONDS, required=False, allow_null=True,
        help_text="Simulated clusters only: seconds of work the job needs.",
    )
    mig_profile = serializers.CharField(
        max_length=16, required=False, allow_blank=True, default="",
        help_text=f"A MIG instance of this profile ({', '.join(MIG_PROFILES)}) on a GPU in MIG mode, instead of a "
                  "whole GPU or a fraction: 1-GPU jobs only, not with gpu_milli.",
    )


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["at", "kind", "detail", "cause", "actor"]


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
    command = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id", "name", "state", "cluster", "project", "user", "gpus", "gpus_per_host", "gpu_type", "gpu_milli",
            "mig_profile", "topology", "cpus", "memory_gib", "min_runtime", "resumable", "max_runtime", "priority",
            "allocation", "queue_position", "project_position", "pending_reason", "estimated_start", "gpu_ids", "hosts",
            "submitted_at", "started_at", "ended_at", "preemptions", "restarts", "exit_code", "stop_cause", "command",
        ]

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_project_position(self, job):
        return self.context.get("project_positions", {}).get(job.pk)

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_gpu_ids(self, job):
        return self.context.get("gpu_ids", {}).get(job.pk, [])

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_hosts(self, job):
        return sorted({gpu_id.split(":")[0] for gpu_id in self.get_gpu_ids(job)})

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_command(self, job):
        """Shown to the job's owner, managers of its project, on-call and admins."""
        visible = self.context.get("command_visible")
        return job.command if visible is None or visible(job) else None


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
             "tail": p.output_tail}
            for p in job.processes.filter(run=job.restarts).select_related("host").order_by("rank")
        ]


class CancelSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class AgentGpuSerializer(serializers.Serializer):
    index = serializers.IntegerField(min_value=0, max_value=1024)
    health = serializers.ChoiceField(choices=["ok", "failed"], default="ok")
    uuid = serializers.CharField(max_length=100, required=False, allow_blank=True)


class AgentEventSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["xid"])
    gpu = serializers.IntegerField(min_value=0, max_value=1024, required=False, allow_null=True)
    code = serializers.IntegerField(min_value=0, max_value=100000)
    detail = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class AgentProcessSerializer(serializers.Serializer):
    job = serializers.IntegerField(min_value=1)
    run = serializers.IntegerField(min_value=0)
    rank = serializers.IntegerField(min_value=0)
    state = serializers.ChoiceField(choices=["running", "exited"])
    pid = serializers.IntegerField(required=False, allow_null=True)
    exit_code = serializers.IntegerField(required=False, allow_null=True)
    output_tail = serializers.CharField(required=False, allow_blank=True, allow_null=True, trim_whitespace=False,
                                        max_length=64000)
    checkpoint_at = serializers.DateTimeField(required=False, allow_null=True)


class HeartbeatSerializer(serializers.Serializer):
    host = serializers.CharField(max_length=96)
    address = serializers.CharField(max_length=255, required=False, allow_blank=True, default="")
    gpus = AgentGpuSerializer(many=True, required=False, default=list)
    events = AgentEventSerializer(many=True, required=False, default=list)
    processes = AgentProcessSerializer(many=True, required=False, default=list)
