from django.db import models


class HostState(models.TextChoices):
    UP = "up", "up"
    CORDONED = "cordoned", "cordoned"
    DRAINING = "draining", "draining"
    DRAINED = "drained", "drained"
    DOWN = "down", "down"


class GpuHealth(models.TextChoices):
    OK = "ok", "ok"
    FAILED = "failed", "failed"


class DomainKind(models.TextChoices):
    NVL72 = "nvl72", "GB200 NVL72 rack"
    RACK = "rack", "NVLink rack"
    SERVER = "server", "server"


class Executor(models.TextChoices):
    AGENT = "agent", "agent"
    SIMULATED = "simulated", "simulated"
