from django.contrib import admin

from accounts.models import ApiToken
from accounts.services import token_revoke


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are made by logins; here an admin reads them and may revoke them (recorded: who and why)."""

    list_display = ["prefix", "user", "name", "state", "created_at", "expires_at", "last_used_at", "revoked_by"]
    list_filter = ["revoked_at"]
    search_fields = ["user__username", "prefix", "name"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset):
        done = sum(token_revoke(token=token, actor=request.user, reason="revoked in the admin") for token in queryset)
        self.message_user(request, f"{done} token{'s' if done != 1 else ''} revoked.")

    def get_actions(self, request):
        # The revoke action is a change: allowed to whoever may change users.
        actions = super().get_actions(request)
        if not request.user.has_perm("auth.change_user"):
            actions.pop("revoke", None)
        return actions
