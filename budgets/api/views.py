from rest_framework import viewsets

from budgets.api.serializers import UnitSerializer
from budgets.models import Unit
from budgets.selectors import HOURS_PER_WEEK, people_by_unit, unit_shares
from topology.models import Cluster


class UnitViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = Unit.objects.select_related("parent")
    serializer_class = UnitSerializer
    lookup_field = "name"
    lookup_value_regex = "[-a-zA-Z0-9_]+"

    def get_serializer_context(self):
        context = super().get_serializer_context()
        children: dict[int, list[str]] = {}
        for parent_id, name in Unit.objects.filter(parent__isnull=False).values_list("parent_id", "name"):
            children.setdefault(parent_id, []).append(name)
        shares: dict[int, dict] = {}
        for cluster in Cluster.objects.all():
            healthy = cluster.gpu_counts()["healthy"]
            for node in unit_shares(cluster, healthy):
                if node.percent_of_parent is None:
                    continue
                shares.setdefault(node.unit.pk, {})[cluster.name] = {
                    "percent_of_parent": float(node.percent_of_parent),
                    "fraction_of_cluster": round(node.fraction_of_cluster, 6),
                    "gpu_hours_per_week": round(node.fraction_of_cluster * healthy * HOURS_PER_WEEK, 1),
                }
        context.update(children=children, people=people_by_unit(), shares=shares)
        return context
