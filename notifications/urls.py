from django.urls import path

from notifications import views

urlpatterns = [
    path("account/notifications/", views.subscription_view, name="notification-subscription"),
]
