from django.contrib import admin

from notifications.models import Notification, Subscription


@admin.register(Subscription)
class SubscriptionAdmin(admin.ModelAdmin):
    list_display = ["user", "email", "webhook_url", "job_start", "job_end", "job_preempted", "budget_waiting"]
    search_fields = ["user__username"]


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = ["created_at", "user", "kind", "channel", "status", "attempts", "last_error"]
    list_filter = ["status", "kind", "channel"]
    search_fields = ["user__username", "subject"]
