from django.contrib import admin

from scheduler.models import GpuAssignment, Job, JobEvent


class AuditAdmin(admin.ModelAdmin):
    """History the scheduler and the services write: read here, never added, changed or deleted.

    A job's events, its GPU assignments (the usage the budgets are charged from) and the job itself are
    that history; a live job is stopped with a cancel (the API, `allot cancel`, the job's page), which
    releases its GPUs through the same service as every other end of a run.
    """

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    readonly_fields = ["at", "kind", "detail", "cause", "actor"]

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Job)
class JobAdmin(AuditAdmin):
    """Jobs are changed by the scheduler and their owners through the API; here they are read."""

    list_display = ["id", "cluster", "project", "user", "gpus", "min_runtime", "state", "submitted_at"]
    list_filter = ["state", "cluster", "topology"]
    search_fields = ["id", "name", "project__name", "user__username"]
    inlines = [JobEventInline]


@admin.register(JobEvent)
class JobEventAdmin(AuditAdmin):
    list_display = ["at", "job", "kind", "cause", "actor", "detail"]
    list_filter = ["kind"]


@admin.register(GpuAssignment)
class GpuAssignmentAdmin(AuditAdmin):
    list_display = ["gpu", "job", "milli", "assigned_at", "released_at"]
    list_filter = ["released_at"]
