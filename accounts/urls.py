from django.contrib.auth import views as auth_views
from django.urls import path

from accounts import views

urlpatterns = [
    path("account/", views.account, name="account"),
    path("account/notifications/", views.subscription_view, name="notification-subscription"),
    path("account/tokens/<id:pk>/revoke/", views.token_revoke_view, name="token-revoke"),
    path("account/password/", views.PasswordChangeView.as_view(), name="password_change"),
    path("account/password/reset/", views.PasswordResetView.as_view(), name="password_reset"),
    path("account/password/reset/sent/",
         auth_views.PasswordResetDoneView.as_view(template_name="accounts/password_reset_sent.html"),
         name="password_reset_done"),
    path("account/password/reset/<uidb64>/<token>/", views.PasswordResetConfirmView.as_view(),
         name="password_reset_confirm"),
    path("account/password/reset/done/",
         auth_views.PasswordResetCompleteView.as_view(template_name="accounts/password_reset_complete.html"),
         name="password_reset_complete"),
]
