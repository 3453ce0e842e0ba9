"""What people ask of the job history and the usage report, checked once for the pages and the API: a bad
value is refused naming the field and what it accepts."""

from datetime import timedelta

from django import forms
from django.utils import timezone

from budgets.models import Unit
from scheduler.choices import JobState
from scheduler.selectors import usage_report
from topology.models import Cluster

STATES = [state.value for state in JobState]
TIME_HELP = "an ISO 8601 time or date: 2026-11-01, 2026-11-01T09:00, 2026-11-01T09:00:00+00:00"
# A usage report covers at most this long (one grouped query over the runs, but a page must stay fast).
MAX_REPORT_DAYS = 400


class StatesField(forms.CharField):
    """Comma-separated job states; each one known."""

    def clean(self, value):
        value = super().clean(value)
        wanted = [part.strip().lower() for part in (value or "").split(",") if part.strip()]
        unknown = [state for state in wanted if state not in STATES]
        if unknown:
            raise forms.ValidationError(f"unknown state {', '.join(unknown)}: use one or more of {', '.join(STATES)}, "
                                        "comma-separated")
        return wanted


class TimeField(forms.DateTimeField):
    default_error_messages = {"invalid": f"not a time: use {TIME_HELP}"}

    def to_python(self, value):
        if isinstance(value, str) and len(value.strip()) == 10:  # a date: its midnight
            value = value.strip() + "T00:00"
        return super().to_python(value)


class HistoryForm(forms.Form):
    """The job history's filters (`GET /api/v1/jobs/` and the Jobs page). `since`/`until`: jobs live in that
    span (ended at or after `since`, or not ended; submitted before `until`)."""

    state = StatesField(required=False, max_length=200, help_text="comma-separated states")
    since = TimeField(required=False, help_text="jobs not ended before this")
    until = TimeField(required=False, help_text="jobs submitted before this")
    cluster = forms.CharField(required=False, max_length=64)
    project = forms.CharField(required=False, max_length=64)
    unit = forms.CharField(required=False, max_length=64, help_text="every project in this unit")
    user = forms.CharField(required=False, max_length=150)
    mine = forms.BooleanField(required=False, help_text="only my jobs")
    my_projects = forms.BooleanField(required=False, help_text="only jobs of projects I belong to")

    def clean(self):
        data = super().clean()
        if data.get("since") and data.get("until") and data["since"] >= data["until"]:
            self.add_error("until", "must be after since")
        return data


class UsageForm(forms.Form):
    """The usage report's period and scope: `since` defaults to 30 days ago, `until` to now."""

    since = TimeField(required=False)
    until = TimeField(required=False)
    cluster = forms.CharField(required=False, max_length=64)
    unit = forms.CharField(required=False, max_length=64, help_text="this unit and those under it")

    def clean(self):
        data = super().clean()
        now = timezone.now()
        until = data.get("until") or now
        since = data.get("since") or until - timedelta(days=30)
        if "since" in self.errors or "until" in self.errors:
            return data
        if since >= until:
            self.add_error("since", "must be before until")
        elif until - since > timedelta(days=MAX_REPORT_DAYS):
            self.add_error("since", f"a report covers at most {MAX_REPORT_DAYS} days")
        data["since"], data["until"] = since, min(until, now)
        if data["since"] >= data["until"] and not self.errors:
            self.add_error("since", "must be in the past")
        # The names, resolved: a name that is not there is refused by name.

        data["cluster_obj"] = data["unit_obj"] = None
        if data.get("cluster"):
            data["cluster_obj"] = Cluster.objects.filter(name=data["cluster"]).first()
            if data["cluster_obj"] is None:
                self.add_error("cluster", f"no cluster named {data['cluster']!r}")
        if data.get("unit"):
            data["unit_obj"] = Unit.objects.filter(name=data["unit"]).first()
            if data["unit_obj"] is None:
                self.add_error("unit", f"no unit named {data['unit']!r}")
        return data

    def report(self) -> dict:
        """The usage report these cleaned values ask for (the API's body; the page renders it)."""
        data = self.cleaned_data
        return {
            "since": data["since"].isoformat(), "until": data["until"].isoformat(),
            "seconds": int((data["until"] - data["since"]).total_seconds()),
            "clusters": usage_report(since=data["since"], until=data["until"], cluster=data["cluster_obj"],
                                     unit=data["unit_obj"]),
        }


def form_errors(form: forms.Form) -> dict[str, list[str]]:
    """A form's errors as the API's 400 body: {field: [message]}."""
    return {field: [str(message) for message in messages] for field, messages in form.errors.items()}
