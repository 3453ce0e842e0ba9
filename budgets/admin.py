from django.contrib import admin

from budgets.models import Allocation, AllocationChange, BudgetRequest, Membership, Unit, UserProfile, WhatIf


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records changed only through the services, where the rules are checked and the change is recorded."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


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
class AllocationAdmin(ReadOnlyAdmin):
    """Shares are read here; change them through the budget pages so the ledger records who and why."""

    list_display = ["unit", "cluster", "share_percent", "valid_from", "valid_to", "temporary", "budget_request"]
    list_filter = ["cluster", "temporary"]
    search_fields = ["unit__name"]


@admin.register(AllocationChange)
class AllocationChangeAdmin(ReadOnlyAdmin):
    list_display = ["at", "unit", "cluster", "before_percent", "after_percent", "actor", "source", "reason"]
    list_filter = ["source", "cluster"]
    search_fields = ["unit__name", "actor", "reason"]


@admin.register(BudgetRequest)
class BudgetRequestAdmin(ReadOnlyAdmin):
    """Read here; requests are filed and decided on the budget pages, where the rules are checked."""

    list_display = ["pk", "unit", "cluster", "requested_by", "requested_percent", "status", "granted_percent",
                    "decided_by", "created_at"]
    list_filter = ["status", "cluster"]
    search_fields = ["unit__name", "requested_by__username", "justification", "comment"]


@admin.register(WhatIf)
class WhatIfAdmin(ReadOnlyAdmin):
    """Read here; what-ifs are run from a request's page or the API."""

    list_display = ["pk", "budget_request", "share_percent", "status", "requested_by", "created_at", "finished_at"]
    list_filter = ["status"]
    search_fields = ["budget_request__unit__name", "requested_by__username", "error"]


@admin.register(UserProfile)
class UserProfileAdmin(admin.ModelAdmin):
    """The OS account each person's jobs run as (`posix_user`; also set by org.yaml `users:`)."""

    list_display = ["user", "posix_user"]
    search_fields = ["user__username", "posix_user"]
    autocomplete_fields = ["user"]
