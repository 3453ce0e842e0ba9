from django.db import models


class Role(models.TextChoices):
    MEMBER = "member", "member"
    MANAGER = "manager", "manager"


class ChangeSource(models.TextChoices):
    LOADER = "loader", "org file"
    REQUEST = "request", "approved request"
    DIRECT = "direct", "direct edit"
    EXPIRY = "expiry", "expiry"
