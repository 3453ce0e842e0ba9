"""Forms for the budget pages. They check shapes; the services check the rules."""

from decimal import Decimal

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError

from budgets.models import Unit
from topology.models import Cluster

SHARE = {"max_digits": 5, "decimal_places": 2, "min_value": Decimal(0), "max_value": Decimal(100)}


class DateTimeLocalInput(forms.DateTimeInput):
    input_type = "datetime-local"

    def __init__(self, **kwargs):
        super().__init__(format="%Y-%m-%dT%H:%M", **kwargs)


class BudgetRequestForm(forms.Form):
    unit = forms.ModelChoiceField(queryset=Unit.objects.none(), to_field_name="name", empty_label=None)
    cluster = forms.ModelChoiceField(queryset=Cluster.objects.all(), to_field_name="name", empty_label=None)
    share = forms.DecimalField(
        **SHARE, label="Share (% of the parent unit)",
        help_text="Percent of the parent's share of the cluster; a top-level unit's share is a percent of the cluster.",
    )
    starts_at = forms.DateTimeField(
        required=False, widget=DateTimeLocalInput(), label=f"Starts ({settings.TIME_ZONE})",
        help_text="Empty: as soon as it is approved.",
    )
    ends_at = forms.DateTimeField(
        required=False, widget=DateTimeLocalInput(), label=f"Ends ({settings.TIME_ZONE})",
        help_text="Optional. A time-limited grant ends on its own; the share before it comes back.",
    )
    justification = forms.CharField(
        max_length=2000, widget=forms.Textarea(attrs={"rows": 4}),
        help_text="What the GPU time is for, and why now.",
    )

    def __init__(self, *args, units, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["unit"].queryset = units


class ApproveForm(forms.Form):
    share = forms.DecimalField(**SHARE, required=False, label="Grant (% of the parent unit)")
    comment = forms.CharField(max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 2}))


class DenyForm(forms.Form):
    comment = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))


class EscalateForm(forms.Form):
    comment = forms.CharField(max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 2}))


class TakeRoomForm(ApproveForm):
    """Approve while lowering siblings' shares: one field per sibling, named `sibling-<name>`."""

    def __init__(self, *args, siblings, **kwargs):
        super().__init__(*args, **kwargs)
        self.siblings = list(siblings)
        for sibling in self.siblings:
            self.fields[f"sibling-{sibling.name}"] = forms.DecimalField(
                **SHARE, required=False, label=sibling.name,
            )

    def take_from(self) -> dict[Unit, Decimal]:
        return {
            sibling: self.cleaned_data[f"sibling-{sibling.name}"]
            for sibling in self.siblings
            if self.cleaned_data.get(f"sibling-{sibling.name}") is not None
        }


class WhatIfForm(forms.Form):
    share = forms.DecimalField(
        **SHARE, required=False, label="Try a share of",
        help_text="Percent of the parent unit; empty: the share asked.",
    )
    force = forms.BooleanField(required=False, widget=forms.HiddenInput)


class SharesForm(forms.Form):
    """A manager sets the shares of a unit's children: one field per child, named `share-<name>`; empty: none.

    A child's field missing from the post altogether (a stale page, a unit added since, a hand-made post) is
    an error, never a removal: only a field sent empty removes an allocation.
    """

    reason = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 2}),
                             help_text="Required: recorded with every change.")

    def __init__(self, *args, children, **kwargs):
        super().__init__(*args, **kwargs)
        self.children = list(children)
        for child in self.children:
            self.fields[f"share-{child.name}"] = forms.DecimalField(**SHARE, required=False, label=child.name)

    def shares(self) -> dict[Unit, Decimal | None]:
        return {child: self.cleaned_data.get(f"share-{child.name}") for child in self.children}

    def clean(self):
        cleaned = super().clean()
        for child in self.children:
            name = f"share-{child.name}"
            if self.is_bound and name not in self.data:
                self.add_error(name, f"{child.name} is missing from the form (reload the page): leave the field "
                                     "empty to remove its allocation")
        total = sum((cleaned.get(f"share-{child.name}") or Decimal(0)) for child in self.children)
        if total > 100:
            raise ValidationError(f"The shares add up to {total.normalize():f} %, over 100 %.")
        return cleaned


def add_service_errors(form: forms.Form, error: ValidationError, aliases: dict[str, str] | None = None) -> None:
    """Put a service's {field: [message]} errors on the form's fields (or the form when it has no such field)."""
    aliases = aliases or {}
    for field, messages in error.message_dict.items():
        name = aliases.get(field, field)
        for message in messages:
            form.add_error(name if name in form.fields else None, message)
