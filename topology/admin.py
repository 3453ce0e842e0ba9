from django.contrib import admin, messages

from topology.models import AgentToken, Block, Cluster, Domain, Gpu, Host, HostEvent, MigInstance


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    """Cluster policy, including the health policy (checked by `Cluster.clean` before it is saved)."""

    list_display = ["name", "executor", "allow_root_jobs", "tick_seconds", "window_seconds", "max_min_runtime_seconds",
                    "fast_lane_gpus"]
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
    list_display = ["name", "domain", "gpu_type", "gpu_count", "state", "state_reason", "last_heartbeat_at",
                    "agent_mode", "containment"]
    list_filter = ["state", "gpu_type", "domain__cluster", "agent_mode", "containment"]
    search_fields = ["name"]
    readonly_fields = ["state", "state_reason", "state_actor", "state_changed_at", "last_heartbeat_at", "agent_mode",
                       "agent_account", "containment", "containment_note"]
    inlines = [GpuInline]


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ["__str__", "health", "mig_enabled", "allocated_milli"]
    list_filter = ["health", "mig_enabled"]
    search_fields = ["host__name"]
    readonly_fields = ["allocated_milli", "mig_enabled", "uuid", "ecc_uncorrected_volatile", "retired_pages_pending",
                       "remapped_rows_pending"]


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


@admin.register(AgentToken)
class AgentTokenAdmin(admin.ModelAdmin):
    """Hosts' agent tokens: only hashes are kept, so a key is shown once, by `manage.py agent_token HOST`
    (`--rotate` issues a new one and revokes the old). Here: list them, and revoke."""

    list_display = ["host", "prefix", "created_at", "created_by", "last_used_at", "revoked_at", "revoked_by",
                    "revoke_reason"]
    list_filter = ["host__domain__cluster", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["host__name", "prefix"]
    fields = list_display
    readonly_fields = list_display
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # revoked, never deleted: the history says which token acted when

    @admin.action(description="Revoke the selected tokens (their agents are refused at once)")
    def revoke(self, request, queryset):
        revoked = [token for token in queryset.select_related("host")
                   if token.revoke(actor=request.user.username, reason="revoked in the admin")]
        self.message_user(request, f"Revoked {len(revoked)} token{'s' if len(revoked) != 1 else ''}: "
                                   + (", ".join(str(token.host) for token in revoked) or "none was live")
                                   + ". Issue a new one with `manage.py agent_token HOST --rotate`.",
                          messages.SUCCESS)
