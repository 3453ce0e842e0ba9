"""The Celery app: the tick, what-if simulations and reports run here in production."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("allot")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
