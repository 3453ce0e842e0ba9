from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduler.racks import host_view
from scheduler.selectors import drain_progress, jobs_on_hosts
from topology.choices import HostState
from topology.models import Cluster, Host


class ClusterSerializer(serializers.ModelSerializer):
    """A cluster, its policy (seconds), and its capacity and occupancy now."""

    policy = serializers.SerializerMethodField()
    capacity = serializers.SerializerMethodField()

    class Meta:
        model = Cluster
        fields = ["name", "executor", "policy", "capacity"]

    @extend_schema_field(serializers.DictField(child=serializers.IntegerField()))
    def get_policy(self, cluster):
        return {
            "tick": cluster.tick_seconds,
            "window": cluster.window_seconds,
            "max_min_runtime": cluster.max_min_runtime_seconds,
            "grace_period": cluster.grace_period_seconds,
            "unallocated_grace": cluster.unallocated_grace_seconds,
            "fast_lane_gpus": cluster.fast_lane_gpus,
            "fast_lane_max_min_runtime": cluster.fast_lane_max_min_runtime_seconds,
            "heartbeat_timeout": cluster.heartbeat_timeout_seconds,
        }

    @extend_schema_field(serializers.DictField())
    def get_capacity(self, cluster):
        return self.context["summaries"][cluster.pk]


class GpuSerializer(serializers.Serializer):
    id = serializers.CharField()
    index = serializers.IntegerField()
    health = serializers.CharField()
    state = serializers.CharField()
    jobs = serializers.SerializerMethodField()
    mig = serializers.BooleanField(help_text="In MIG mode: takes only jobs asking for a MIG profile.")
    mig_instances = serializers.SerializerMethodField(help_text="MIG mode: its instances, by start slot.")
    health_event = serializers.SerializerMethodField(
        help_text="The latest health event naming it (`XID 79`, `NVML error`, …) since its host came back into "
                  "service, within a day; null when none.")

    @extend_schema_field(serializers.DictField(allow_null=True))
    def get_health_event(self, gpu):
        if not gpu.mark:
            return None
        return {"label": gpu.mark, "at": gpu.mark_at, "detail": gpu.mark_detail}

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_jobs(self, gpu):
        return [
            {"job": job_id, "project": project, "gpu_milli": milli, "allocated": allocated}
            for job_id, project, milli, allocated in gpu.jobs
        ]

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_mig_instances(self, gpu):
        return [{"profile": profile, "start": start, "job": job} for profile, start, job in gpu.mig_instances]


class HostSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="domain.cluster.name", read_only=True)
    domain = serializers.CharField(source="domain.name", read_only=True)
    block = serializers.CharField(source="domain.block.name", read_only=True, default=None, allow_null=True)

    class Meta:
        model = Host
        fields = [
            "name", "cluster", "domain", "block", "position", "gpu_type", "gpu_count", "cpus", "memory_gib",
            "fast_lane", "state", "state_reason", "state_actor", "state_changed_at", "last_heartbeat_at",
            "agent_mode", "agent_account", "containment", "containment_note",
        ]


class HostDetailSerializer(HostSerializer):
    gpus = serializers.SerializerMethodField()
    drain_progress = serializers.SerializerMethodField(
        help_text="While draining: jobs left, when the last leaves and why then, and each job's, as the scheduler "
                  "decided it (times null until its first tick of the drain); null otherwise.")

    class Meta(HostSerializer.Meta):
        fields = [*HostSerializer.Meta.fields, "gpus", "drain_progress"]

    @extend_schema_field(GpuSerializer(many=True))
    def get_gpus(self, host):
        return GpuSerializer(host_view(host).gpus, many=True).data

    @extend_schema_field(serializers.DictField(allow_null=True))
    def get_drain_progress(self, host):
        if host.state != HostState.DRAINING:
            return None

        jobs = jobs_on_hosts([host]).get(host.pk, [])
        progress = drain_progress(jobs)
        return {
            "jobs_left": progress.jobs_left,
            "last_leaves_at": progress.last_leaves_at,
            "why": progress.last_why,
            "jobs": [{"job": row.job.pk, "leaves_at": row.leaves_at, "why": row.leaves_why} for row in jobs],
        }


class HostActionSerializer(serializers.Serializer):
    reason = serializers.CharField(
        max_length=500, help_text="Why: kept in the host's history and shown to whoever repairs it.",
        error_messages={"blank": "required: say why, for the host's history and whoever repairs it",
                        "required": "required: say why, for the host's history and whoever repairs it"},
    )
