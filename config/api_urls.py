"""REST API v1: the stable core of FORMATS.md, plus the schema and its docs."""

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from accounts.api import TokenObtainView, TokenViewSet
from operations.api.budgets.views import BudgetRequestViewSet, UnitViewSet
from operations.api.topology.views import ClusterViewSet, HostViewSet
from scheduler.api.views import HeartbeatView, JobViewSet, UsageView

router = DefaultRouter()
router.register("clusters", ClusterViewSet)
router.register("hosts", HostViewSet)
router.register("units", UnitViewSet)
router.register("budget-requests", BudgetRequestViewSet)
router.register("jobs", JobViewSet)
router.register("auth/tokens", TokenViewSet, basename="token")

urlpatterns = [
    path("v1/auth/token/", TokenObtainView.as_view(), name="api-token"),
    path("v1/agent/heartbeat/", HeartbeatView.as_view(), name="agent-heartbeat"),
    path("v1/usage/", UsageView.as_view(), name="api-usage"),
    path("v1/", include((router.urls, "api"))),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves Swagger UI's set-up script as a file: the pages' CSP allows no inline script.
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="schema", template_name="api/swagger_ui.html"),
         name="swagger-ui"),
]
