from django import template
from django.utils import timezone

from scheduler.core.durations import format_duration
from scheduler.core.hostlist import compress
from scheduler.core.model import gpu_host
from scheduler.core.reasons import format_percent

register = template.Library()


@register.filter
def duration(seconds):
    """Seconds as 45s, 15m, 2h30m, 7d."""
    if seconds in (None, ""):
        return "—"
    return format_duration(float(seconds))


@register.filter
def since(moment):
    """How long ago: 5m, 2h10m."""
    if not moment:
        return "—"
    return format_duration((timezone.now() - moment).total_seconds())


@register.filter
def until(moment):
    """How long from now: in 5m, or 'now' once passed."""
    if not moment:
        return "—"
    seconds = (moment - timezone.now()).total_seconds()
    return f"in {format_duration(seconds)}" if seconds > 0 else "now"


@register.filter
def ratio(value):
    """A usage ratio (or any share) as every page, reason and CLI line writes it, the core's
    `format_percent`: 0.04 %, 3.5 %, 42 %; `—` for none (a unit entitled to nothing)."""
    if value is None or value == "":
        return "—"
    return format_percent(float(value))


@register.filter
def hostlist(names):
    """Host names folded Slurm-style: nvl72-01-h[01-16]."""
    return compress(names or [])


@register.filter
def iso_time(value):
    """An ISO timestamp (as the tick stores reservations) as local time and how far off: 14:05 (in 50m)."""
    from datetime import datetime

    if not value:
        return "—"
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    local = timezone.localtime(moment) if timezone.is_aware(moment) else moment
    return f"{local:%H:%M} ({until(moment)})"


@register.filter
def cause_link(cause):
    """A machine cause (job:812, drain:host, down:host, defrag, max_runtime, cancel) as words with links."""
    from django.urls import reverse
    from django.utils.html import format_html

    if not cause:
        return ""
    kind, _, subject = str(cause).partition(":")
    if kind == "job" and subject.isascii() and subject.isdigit():
        return format_html('for <a href="{}">job {}</a>', reverse("job-detail", args=[int(subject)]), subject)
    if kind in ("drain", "down") and subject:
        words = "drain of" if kind == "drain" else "host down:"
        return format_html('{} <a href="{}">{}</a>', words, reverse("host-detail", args=[subject]), subject)
    return {"defrag": "defragmentation", "max_runtime": "maximum runtime reached", "cancel": "cancelled"}.get(
        str(cause), str(cause))


@register.filter
def gpu_summary(detail):
    """A start event's GPU ids ("h:0 h:1 …") as "8 GPUs on nvl72-01-h[01-02]"."""
    gpu_ids = str(detail or "").split()
    if not gpu_ids or not all(":" in gpu_id for gpu_id in gpu_ids):
        return detail
    hosts = compress({gpu_host(gpu_id) for gpu_id in gpu_ids})
    if len(gpu_ids) == 1:
        return f"GPU {gpu_ids[0]}"
    return f"{len(gpu_ids)} GPUs on {hosts}"
