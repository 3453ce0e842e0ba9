from django.apps import AppConfig


class OperationsConfig(AppConfig):
    """The pages, API views and metrics that read several apps: the top layer (pyproject.toml's layers)."""

    name = "operations"
    verbose_name = "Pages and metrics"
