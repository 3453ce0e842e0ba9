from django.apps import AppConfig


class TopologyConfig(AppConfig):
    name = "topology"
    verbose_name = "Clusters and hosts"
