from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from budgets.selectors import HOURS_PER_WEEK, people_by_unit, unit_shares, walk_units
from topology.models import Cluster


@login_required
def org_tree(request):
    """Every unit with its share of each cluster: % of parent, % of cluster, GPU-hours per week."""
    people = people_by_unit()
    rows = {
        unit.pk: {"unit": unit, "depth": depth, "people": people.get(unit.pk, {}), "shares": []}
        for unit, depth in walk_units()
    }
    columns = []
    for cluster in Cluster.objects.all():
        healthy = cluster.gpu_counts()["healthy"]
        columns.append({"cluster": cluster, "healthy_gpus": healthy})
        for node in unit_shares(cluster, healthy):
            rows[node.unit.pk]["shares"].append({
                "percent": node.percent_of_parent,
                "percent_of_cluster": node.fraction_of_cluster * 100,
                "gpu_hours_per_week": node.fraction_of_cluster * healthy * HOURS_PER_WEEK,
            })
    return render(request, "budgets/org_tree.html", {"columns": columns, "rows": list(rows.values())})
