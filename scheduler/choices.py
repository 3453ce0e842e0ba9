from django.db import models


class JobState(models.TextChoices):
    PENDING = "pending", "pending"
    STARTING = "starting", "starting"
    RUNNING = "running", "running"
    PREEMPTING = "preempting", "preempting"
    COMPLETED = "completed", "completed"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"
    PREEMPTED = "preempted", "preempted"


# States in which a job holds GPUs.
LIVE_STATES = (JobState.STARTING, JobState.RUNNING, JobState.PREEMPTING)
FINAL_STATES = (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.PREEMPTED)


class Topology(models.TextChoices):
    ANY = "any", "any"
    DOMAIN = "domain", "one NVLink domain"
    PREFERRED = "preferred", "one domain if possible"


class Priority(models.TextChoices):
    LOW = "low", "low"
    NORMAL = "normal", "normal"
    HIGH = "high", "high"


class EventKind(models.TextChoices):
    SUBMIT = "submit", "submitted"
    START = "start", "started"
    PREEMPT = "preempt", "preempted"
    REQUEUE = "requeue", "requeued"
    FINISH = "finish", "finished"
    STOP = "stop", "stopped"
    FAIL = "fail", "failed"
    CANCEL = "cancel", "cancelled"
    CHECKPOINT = "checkpoint", "checkpoint"
    # GPUs held for a job that preempted others (rule 4), and their release.
    EARMARK = "earmark", "GPUs held"
