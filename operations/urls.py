from django.urls import path

from operations import views

urlpatterns = [
    path("", views.cluster_list, name="home"),
    path("clusters/", views.cluster_list, name="cluster-list"),
    path("clusters/<slug:name>/", views.cluster_detail, name="cluster-detail"),
    path("clusters/<slug:name>/dashboard.json", views.cluster_dashboard_data, name="cluster-dashboard-data"),
    path("clusters/<slug:name>/domains/<slug:domain>/", views.domain_detail, name="domain-detail"),
    path("hosts/<slug:name>/", views.host_detail, name="host-detail"),
    path("hosts/<slug:name>/<slug:action>/", views.host_action, name="host-action"),
    path("repairs/", views.repairs, name="repairs"),
    path("queue/", views.queue_home, name="queue-home"),
    path("clusters/<slug:name>/queue/", views.queue, name="queue"),
]
