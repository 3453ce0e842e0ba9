from django.contrib import admin

from scheduler.models import GpuAssignment, Job, JobEvent


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    readonly_fields = ["at", "kind", "detail", "cause", "actor"]

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    """Jobs are changed by the scheduler and their owners through the API; here they are read."""

    list_display = ["id", "cluster", "project", "user", "gpus", "min_runtime", "state", "submitted_at"]
    list_filter = ["state", "cluster", "topology"]
    search_fields = ["id", "name", "project__name", "user__username"]
    inlines = [JobEventInline]

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(JobEvent)
class JobEventAdmin(admin.ModelAdmin):
    list_display = ["at", "job", "kind", "cause", "actor", "detail"]
    list_filter = ["kind"]

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(GpuAssignment)
class GpuAssignmentAdmin(admin.ModelAdmin):
    list_display = ["gpu", "job", "milli", "assigned_at", "released_at"]
    list_filter = ["released_at"]

    def has_change_permission(self, request, obj=None):
        return False
