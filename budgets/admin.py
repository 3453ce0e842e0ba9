from django.contrib import admin

from budgets.models import Allocation, AllocationChange, Membership, Unit


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Unit)
class UnitAdmin(admin.ModelAdmin):
    list_display = ["name", "parent", "description"]
    search_fields = ["name"]
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "unit", "role"]
    list_filter = ["role"]
    search_fields = ["user__username", "unit__name"]


@admin.register(Allocation)
class AllocationAdmin(admin.ModelAdmin):
    """Shares are read here; change them through the budget pages so the ledger records who and why."""

    list_display = ["unit", "cluster", "share_percent", "valid_from", "valid_to"]
    list_filter = ["cluster"]
    search_fields = ["unit__name"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AllocationChange)
class AllocationChangeAdmin(admin.ModelAdmin):
    list_display = ["at", "unit", "cluster", "before_percent", "after_percent", "actor", "source", "reason"]
    list_filter = ["source", "cluster"]
    search_fields = ["unit__name", "actor", "reason"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
