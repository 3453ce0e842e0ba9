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


class AgentMode(models.TextChoices):
    ROOT = "root", "runs each job as its submitter"
    SINGLE_USER = "single-user", "single-user agent"


class Containment(models.TextChoices):
    V2 = "v2", "cgroup v2"
    V1 = "v1", "cgroup v1"
    NONE = "none", "none (process groups)"
