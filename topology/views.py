from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render

from topology.models import Cluster, Domain, Host
from topology.selectors import cluster_summary, domain_views, host_view


@login_required
def cluster_list(request):
    clusters = [(cluster, cluster_summary(cluster)) for cluster in Cluster.objects.all()]
    return render(request, "topology/cluster_list.html", {"clusters": clusters})


@login_required
def cluster_detail(request, name):
    cluster = get_object_or_404(Cluster, name=name)
    views = domain_views(cluster)
    return render(
        request,
        "topology/cluster_detail.html",
        {"cluster": cluster, "domains": views, "summary": cluster_summary(cluster, views)},
    )


@login_required
def domain_detail(request, name, domain):
    cluster = get_object_or_404(Cluster, name=name)
    domain = get_object_or_404(Domain, cluster=cluster, name=domain)
    (view,) = domain_views(cluster, domain=domain)
    return render(request, "topology/domain_detail.html", {"cluster": cluster, "view": view})


@login_required
def host_detail(request, name):
    host = get_object_or_404(Host.objects.select_related("domain__cluster", "domain__block"), name=name)
    return render(
        request,
        "topology/host_detail.html",
        {"host": host, "view": host_view(host), "events": host.events.all()[:50]},
    )
