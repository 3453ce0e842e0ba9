from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from topology.models import Cluster, Host
from topology.selectors import host_view


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

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_jobs(self, gpu):
        return [
            {"job": job_id, "project": project, "gpu_milli": milli, "allocated": allocated}
            for job_id, project, milli, allocated in gpu.jobs
        ]


class HostSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="domain.cluster.name", read_only=True)
    domain = serializers.CharField(source="domain.name", read_only=True)
    block = serializers.CharField(source="domain.block.name", read_only=True, default=None)

    class Meta:
        model = Host
        fields = [
            "name", "cluster", "domain", "block", "position", "gpu_type", "gpu_count", "cpus", "memory_gib",
            "fast_lane", "state", "state_reason", "state_actor", "state_changed_at", "last_heartbeat_at",
        ]


class HostDetailSerializer(HostSerializer):
    gpus = serializers.SerializerMethodField()

    class Meta(HostSerializer.Meta):
        fields = [*HostSerializer.Meta.fields, "gpus"]

    @extend_schema_field(GpuSerializer(many=True))
    def get_gpus(self, host):
        return GpuSerializer(host_view(host).gpus, many=True).data
