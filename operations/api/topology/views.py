from drf_spectacular.utils import extend_schema
from rest_framework import permissions, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.response import Response

from budgets.permissions import is_oncall
from operations.api.topology.serializers import (
    ClusterSerializer,
    HostActionSerializer,
    HostDetailSerializer,
    HostSerializer,
)
from scheduler.racks import cluster_summary
from scheduler.selectors import pending_demand
from topology.models import Cluster, Host
from topology.services import HostActionError, host_cordon, host_drain, host_resume


class StateConflict(APIException):
    status_code = 409
    default_code = "state_conflict"


class IsOnCall(permissions.BasePermission):
    message = "Only on-call engineers (group oncall) may cordon, drain or resume hosts."

    def has_permission(self, request, view):
        return is_oncall(request.user)


class ClusterViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = Cluster.objects.all()
    serializer_class = ClusterSerializer
    lookup_field = "name"
    lookup_value_regex = "[-a-zA-Z0-9_]+"

    def get_serializer_context(self):
        context = super().get_serializer_context()
        if self.action == "retrieve":
            clusters = [self.get_object()]
        else:
            clusters = list(self.filter_queryset(self.get_queryset()))
        context["summaries"] = {cluster.pk: self._summary(cluster) for cluster in clusters}
        return context

    @staticmethod
    def _summary(cluster):
        return {**cluster_summary(cluster), "pending": pending_demand(cluster)}


class HostViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = Host.objects.select_related("domain__cluster", "domain__block")
    lookup_field = "name"
    lookup_value_regex = "[-a-zA-Z0-9_]+"

    def get_serializer_class(self):
        return HostDetailSerializer if self.action == "retrieve" else HostSerializer

    def get_queryset(self):
        queryset = super().get_queryset()
        params = self.request.query_params
        if params.get("cluster"):
            queryset = queryset.filter(domain__cluster__name=params["cluster"])
        if params.get("state"):
            queryset = queryset.filter(state=params["state"])
        if params.get("domain"):
            queryset = queryset.filter(domain__name=params["domain"])
        return queryset

    def _act(self, request, service):
        host = self.get_object()
        body = HostActionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            result = service(host=host, actor=request.user, reason=body.validated_data["reason"])
        except HostActionError as error:
            if error.field:
                raise ValidationError({error.field: [error.message]}) from None
            raise StateConflict(error.message) from None
        host = self.get_queryset().get(pk=result.host.pk)
        return Response({**HostDetailSerializer(host).data, "changed": result.changed, "detail": result.message})

    @extend_schema(request=HostActionSerializer, responses={200: HostDetailSerializer})
    @action(detail=True, methods=["post"], permission_classes=[permissions.IsAuthenticated, IsOnCall])
    def cordon(self, request, name=None):
        """On-call: no new jobs on the host; running ones stay."""
        return self._act(request, host_cordon)

    @extend_schema(request=HostActionSerializer, responses={200: HostDetailSerializer})
    @action(detail=True, methods=["post"], permission_classes=[permissions.IsAuthenticated, IsOnCall])
    def drain(self, request, name=None):
        """On-call: no new jobs; unallocated jobs leave at once, allocated ones at their minimum runtime."""
        return self._act(request, host_drain)

    @extend_schema(request=HostActionSerializer, responses={200: HostDetailSerializer})
    @action(detail=True, methods=["post"], permission_classes=[permissions.IsAuthenticated, IsOnCall])
    def resume(self, request, name=None):
        """On-call: back in service, from cordoned, draining, drained or down."""
        return self._act(request, host_resume)
