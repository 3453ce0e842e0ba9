from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path, register_converter
from django.views.generic import RedirectView

from config.converters import IdConverter
from config.health import healthz, readyz
from operations.metrics import metrics_view

# Before the apps' URL modules are included: they use <id:pk>.
register_converter(IdConverter, "id")

urlpatterns = [
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("accounts.urls")),
    path("api/", include("config.api_urls")),
    path("", include("operations.urls")),
    path("", include("operations.budget_urls")),
    path("", include("scheduler.urls")),
    path("metrics", metrics_view, name="metrics"),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    # Browsers ask for it on pages that name no icon (the admin's).
    path("favicon.ico", RedirectView.as_view(url=static("img/allot.svg"), permanent=True)),
]

handler400 = "config.errors.bad_request"
handler403 = "config.errors.permission_denied"
handler404 = "config.errors.not_found"
handler500 = "config.errors.server_error"
