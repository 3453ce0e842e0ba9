from rest_framework import viewsets

from topology.api.serializers import ClusterSerializer, HostDetailSerializer, HostSerializer
from topology.models import Cluster, Host
from topology.selectors import cluster_summary


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
        from scheduler.selectors import pending_demand

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
