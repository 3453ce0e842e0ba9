from django.contrib import admin

from topology.models import Block, Cluster, Domain, Gpu, Host, HostEvent, MigInstance


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    """Cluster policy, including the health policy (checked by `Cluster.clean` before it is saved)."""

    list_display = ["name", "executor", "tick_seconds", "window_seconds", "max_min_runtime_seconds", "fast_lane_gpus"]
    search_fields = ["name"]


@admin.register(Block)
class BlockAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster"]
    list_filter = ["cluster"]


@admin.register(Domain)
class DomainAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "block", "kind"]
    list_filter = ["cluster", "kind"]
    search_fields = ["name"]


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0
    readonly_fields = ["allocated_milli", "mig_enabled"]


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):
    list_display = ["name", "domain", "gpu_type", "gpu_count", "state", "state_reason", "last_heartbeat_at"]
    list_filter = ["state", "gpu_type", "domain__cluster"]
    search_fields = ["name"]
    readonly_fields = ["state", "state_reason", "state_actor", "state_changed_at", "last_heartbeat_at"]
    inlines = [GpuInline]


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ["__str__", "health", "mig_enabled", "allocated_milli"]
    list_filter = ["health", "mig_enabled"]
    search_fields = ["host__name"]
    readonly_fields = ["allocated_milli", "mig_enabled"]


@admin.register(MigInstance)
class MigInstanceAdmin(admin.ModelAdmin):
    """MIG instances are the scheduler's to create and destroy (MIG mode itself comes from the cluster file)."""

    list_display = ["gpu", "profile", "start", "created_at", "destroyed_at"]
    list_filter = ["profile"]
    search_fields = ["gpu__host__name"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(HostEvent)
class HostEventAdmin(admin.ModelAdmin):
    """A host's history (state changes with who and why, health events): read here, never edited or deleted."""

    list_display = ["at", "host", "kind", "code", "detail", "actor"]
    list_filter = ["kind"]
    search_fields = ["host__name", "detail"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
