"""Budget pages: the org tree with usage, a unit's budget, requests and their decisions, direct reallocation.

Views read through selectors, change through services, and render. Every
form posts with Django's CSRF token; every change names its actor and reason.
"""

from decimal import ROUND_HALF_EVEN, Decimal

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from accounts.throttles import what_if_wait
from budgets import selectors, services
from budgets.choices import RequestStatus
from budgets.forms import (
    ApproveForm,
    BudgetRequestForm,
    DenyForm,
    EscalateForm,
    SharesForm,
    TakeRoomForm,
    WhatIfForm,
    add_service_errors,
)
from budgets.models import BudgetRequest, Unit
from budgets.permissions import belongs_to, can_decide, can_edit_shares
from operations import whatif
from operations.selectors import budget_tree, usage_vs_entitlement
from scheduler.core.durations import format_duration
from topology.models import Cluster

CENT = Decimal("0.01")


def _cluster(request) -> Cluster | None:
    """The cluster a page is about: ?cluster=name, else the first one."""
    name = request.GET.get("cluster") or request.POST.get("cluster")
    if name:
        return get_object_or_404(Cluster, name=name)
    return Cluster.objects.first()


def _member_units(user):
    return Unit.objects.filter(memberships__user=user).distinct().order_by("name")


@login_required
def budget_overview(request):
    """The org tree on one cluster: shares, GPU-hours, window usage, ratio, pending demand, open requests."""
    cluster = _cluster(request)
    now = timezone.now()
    context = {"cluster": cluster, "clusters": Cluster.objects.all(), "rows": [], "now": now}
    if cluster is not None:
        gpus = cluster.schedulable_gpus()
        context.update(
            rows=budget_tree(cluster, now=now, schedulable_gpus=gpus),
            schedulable_gpus=gpus,
            window_days=cluster.window_seconds / 86400,
            top_level_percent=selectors.top_level_percent(cluster, at=now),
            can_edit_top=can_edit_shares(request.user, None),
        )
    context.update(
        waiting=list(selectors.waiting_for(request.user)[:20]),
        mine=list(selectors.visible_requests(request.user).filter(requested_by=request.user)[:10]),
        member_of={unit.pk for unit in _member_units(request.user)},
    )
    return render(request, "budgets/overview.html", context)


@login_required
def unit_detail(request, name):
    """One unit on one cluster: its numbers, children, usage vs entitlement, schedule, requests and history."""
    unit = get_object_or_404(Unit.objects.select_related("parent"), name=name)
    cluster = _cluster(request)
    if cluster is None:
        raise Http404("no cluster yet")
    now = timezone.now()
    gpus = cluster.schedulable_gpus()
    tree = budget_tree(cluster, now=now, schedulable_gpus=gpus)
    by_id = {row.unit.pk: row for row in tree}
    children = [row for row in tree if row.unit.parent_id == unit.pk]
    # Its requests and its children's: a manager looking at a program sees what its projects ask for.
    visible = selectors.visible_requests(request.user).filter(
        unit__in=[unit, *(row.unit for row in children)], cluster=cluster,
    )
    schedule = selectors.scheduled_periods(unit, cluster, now=now)
    history = selectors.unit_history(unit, cluster)
    return render(request, "budgets/unit_detail.html", {
        "unit": unit, "cluster": cluster, "clusters": Cluster.objects.all(), "now": now, "schedulable_gpus": gpus,
        # Requests named in the schedule and history link to their page only for those who may open it.
        "visible_request_ids": selectors.visible_request_ids(request.user, [
            *(period.budget_request.pk for period in schedule if getattr(period, "budget_request", None)),
            *(change.budget_request_id for change in history),
        ]),
        "row": by_id[unit.pk],
        "parent_row": by_id.get(unit.parent_id),
        "children": children,
        "path": unit.path(),
        "plot": usage_vs_entitlement(unit, cluster, now=now, schedulable_gpus=gpus),
        "schedule": schedule,
        "requests": list(visible[:50]),
        "open_requests": by_id[unit.pk].open_requests,
        "history": history,
        "can_request": belongs_to(request.user, unit),
        "can_edit_children": can_edit_shares(request.user, unit),
    })


@login_required
def request_list(request):
    visible = selectors.visible_requests(request.user)
    return render(request, "budgets/request_list.html", {
        "waiting": list(selectors.waiting_for(request.user)),
        "mine": list(visible.filter(requested_by=request.user)[:100]),
        "decided": list(
            visible.exclude(requested_by=request.user).exclude(status=RequestStatus.PENDING)[:100]
        ),
    })


@login_required
def request_new(request):
    units = _member_units(request.user)
    if request.method == "POST":
        form = BudgetRequestForm(request.POST, units=Unit.objects.all())
        if form.is_valid():
            data = form.cleaned_data
            try:
                created = services.budget_request_create(
                    user=request.user, unit=data["unit"], cluster=data["cluster"], share=data["share"],
                    starts_at=data["starts_at"], ends_at=data["ends_at"], justification=data["justification"],
                )
            except ValidationError as error:
                add_service_errors(form, error)
            else:
                messages.success(request, f"Request #{created.pk} sent to {_decided_by(created)}.")
                return redirect("budget-request-detail", pk=created.pk)
        form.fields["unit"].queryset = units
    else:
        initial = {key: request.GET[key] for key in ("unit", "cluster", "share") if request.GET.get(key)}
        form = BudgetRequestForm(initial=initial, units=units)
    cluster = _cluster(request)
    mine = []
    if cluster is not None:
        # The numbers for the units one may ask for: share now, usage, and how much room their parent has free.
        member_of = set(units.values_list("pk", flat=True))
        tree = budget_tree(cluster, now=timezone.now())
        rooms = {row.unit.pk: row.room_percent for row in tree}
        top_room = max(Decimal(100) - selectors.top_level_percent(cluster, at=timezone.now()), Decimal(0))
        mine = [row for row in tree if row.unit.pk in member_of]
        for row in mine:
            row.parent_room = rooms[row.unit.parent_id] if row.unit.parent_id else top_room
    return render(request, "budgets/request_form.html", {
        "form": form, "has_units": units.exists(), "cluster": cluster, "mine": mine,
    })


def _decided_by(budget_request: BudgetRequest) -> str:
    if budget_request.decider_unit is None:
        return "the operators"
    return f"the managers of {budget_request.decider_unit.name}"


def _visible_request(request, pk) -> BudgetRequest:
    found = selectors.visible_requests(request.user).filter(pk=pk).first()
    if found is None:
        raise Http404("no such request, or not one you may see")
    return found


def _decision_context(request, budget_request: BudgetRequest, *, forms=None) -> dict:
    """The numbers a manager needs next to the decision buttons."""
    unit, cluster = budget_request.unit, budget_request.cluster
    now = timezone.now()
    gpus = cluster.schedulable_gpus()
    tree = budget_tree(cluster, now=now, schedulable_gpus=gpus)
    by_id = {row.unit.pk: row for row in tree}
    siblings = [row for row in tree if row.unit.parent_id == unit.parent_id and row.unit.pk != unit.pk]
    start = budget_request.effective_start(now)
    until = selectors.span_end(unit, cluster, start, budget_request.ends_at, now)
    room = selectors.room_for(unit, cluster, start=start, end=until, now=now)
    parent_row = by_id.get(unit.parent_id)
    parent_fraction = parent_row.fraction_of_cluster if parent_row else 1.0
    # The amount asked, in GPU-hours, held fixed: if the parent's share changed since (an approved
    # escalation), the same GPU-hours are a different percent of it.
    same_gpu_hours = None
    if parent_fraction > 0:
        same_gpu_hours = min(
            Decimal(str(budget_request.requested_fraction() / parent_fraction * 100)).quantize(
                CENT, rounding=ROUND_HALF_EVEN), Decimal(100),
        )
    parent_changed = (
        same_gpu_hours is not None and abs(parent_fraction - budget_request.parent_fraction_at_request) > 1e-9
    )
    grant = same_gpu_hours if parent_changed else budget_request.requested_percent
    no_room = grant > room["room"]
    may_decide = budget_request.status == RequestStatus.PENDING and can_decide(request.user, budget_request)
    suggestions = selectors.suggested_take_from(unit, cluster, grant, at=start) if no_room else {}
    forms = forms or {}
    sibling_units = [row.unit for row in siblings]
    approve_form = forms.get("approve") or ApproveForm(initial={"share": grant}, auto_id="approve_%s")
    room_form = forms.get("room") or TakeRoomForm(
        siblings=sibling_units, auto_id="room_%s",
        initial={"share": grant, **{f"sibling-{row.unit.name}": suggestions.get(row.unit.pk) for row in siblings}},
    )
    sibling_rows = [
        {"row": row, "field": room_form[f"sibling-{row.unit.name}"], "suggested": suggestions.get(row.unit.pk)}
        for row in siblings
    ]
    escalations = list(budget_request.escalations.select_related("unit", "decided_by"))
    return {
        "budget_request": budget_request, "unit": unit, "cluster": cluster, "now": now, "schedulable_gpus": gpus,
        "row": by_id[unit.pk], "parent_row": parent_row, "siblings": sibling_rows,
        "start": start, "room": room, "no_room": no_room, "grant": grant,
        "same_gpu_hours": same_gpu_hours, "parent_changed": parent_changed,
        "asked_gpu_hours_per_week": budget_request.requested_fraction() * gpus * selectors.HOURS_PER_WEEK,
        "grant_gpu_hours_per_week": float(grant) / 100 * parent_fraction * gpus * selectors.HOURS_PER_WEEK,
        "may_decide": may_decide,
        "may_cancel": budget_request.is_open and budget_request.requested_by_id == request.user.pk,
        "may_escalate": may_decide and unit.parent_id is not None and no_room,
        "deciders": selectors.deciders(budget_request),
        "decided_by_text": _decided_by(budget_request),
        "escalations": escalations,
        "visible_request_ids": selectors.visible_request_ids(
            request.user, [budget_request.escalated_from_id, *(up.pk for up in escalations)]),
        "changes": list(budget_request.changes.select_related("unit").order_by("at", "id")),
        "approve_form": approve_form, "room_form": room_form,
        "deny_form": forms.get("deny") or DenyForm(auto_id="deny_%s"),
        "escalate_form": forms.get("escalate") or EscalateForm(auto_id="escalate_%s"),
        **_what_if_context(budget_request, grant=grant, form=forms.get("what_if")),
    }


def _what_if_context(budget_request: BudgetRequest, *, grant=None, form=None) -> dict:
    """The what-if section: the latest result (or its status) and the button."""
    latest = selectors.latest_what_if(budget_request)
    initial = grant if grant is not None else budget_request.requested_percent
    return {
        "budget_request": budget_request,
        "what_if": latest,
        "what_if_rows": _what_if_rows(latest),
        "what_if_cluster": (latest.results.get("cluster") if latest is not None and latest.is_done else None),
        "what_if_form": form or WhatIfForm(initial={"share": initial}, auto_id="what_if_%s"),
        "may_run_what_if": budget_request.is_open,
    }


def _what_if_rows(what_if) -> list[dict]:
    """Per affected unit: both sides next to each other, whether the change moves its numbers, and which moves
    are no larger than chance (the control run's noise)."""
    if what_if is None or not what_if.is_done:
        return []
    rows = []
    for unit in what_if.results.get("units", []):
        before, after, noise = unit["without"], unit["with"], unit.get("noise") or {}
        within = {}
        for key in ("usage_ratio", "wait_p90"):
            if before[key] is not None and after[key] is not None and noise.get(key) is not None:
                within[key] = before[key] != after[key] and abs(after[key] - before[key]) <= noise[key]
        rows.append({**unit, "within_noise": within,
                     "changed": any(before[key] != after[key] for key in ("usage_ratio", "wait_p90"))})
    return rows


@login_required
def request_detail(request, pk):
    budget_request = _visible_request(request, pk)
    return render(request, "budgets/request_detail.html", _decision_context(request, budget_request))


def _decide(request, pk, form_key, form, act, done):
    """Run a decision service on a valid form; on a refusal, show the page again with the error on the form."""
    budget_request = _visible_request(request, pk)
    if form.is_valid():
        try:
            result = act(budget_request, form)  # PermissionDenied → 403 with its message
        except ValidationError as error:
            add_service_errors(form, error, aliases={"take_from": None, "status": None, "ends_at": None})
        else:
            messages.success(request, done(result))
            return redirect("budget-request-detail", pk=result.pk)
    context = _decision_context(request, budget_request, forms={form_key: form})
    return render(request, "budgets/request_detail.html", context, status=400)


@login_required
@require_http_methods(["GET", "POST"])
def request_what_if(request, pk):
    """POST: run the what-if (or show the cached result for this state); GET: the what-if section alone, which
    the request page polls while a run is queued or running."""
    budget_request = _visible_request(request, pk)
    if request.method == "GET":
        return render(request, "budgets/_what_if.html", _what_if_context(budget_request))
    form = WhatIfForm(request.POST, auto_id="what_if_%s")
    wait = what_if_wait(request, budget_request.pk) if form.is_valid() else None
    if wait is not None:
        form.add_error(None, f"Too many what-if runs for now (each simulates a week of the cluster twice): "
                             f"try again in {format_duration(wait)}.")
    if form.is_valid():
        try:
            found, created = whatif.what_if_submit(
                budget_request=budget_request, user=request.user, share=form.cleaned_data["share"],
                force=form.cleaned_data["force"],
            )
        except ValidationError as error:
            add_service_errors(form, error, aliases={"status": None})
        else:
            if not created:
                messages.info(request, f"What-if #{found.pk} is for the cluster as it is now: shown below "
                                       "(“Run again” simulates anew).")
            elif found.status == "failed":
                messages.error(request, f"What-if #{found.pk} failed: {found.error}")
            return redirect(reverse("budget-request-detail", args=[pk]) + "#what-if")
    context = _decision_context(request, budget_request, forms={"what_if": form})
    return render(request, "budgets/request_detail.html", context, status=429 if wait is not None else 400)


@login_required
@require_POST
def request_approve(request, pk):
    budget_request = _visible_request(request, pk)
    with_room = any(key.startswith("sibling-") for key in request.POST)
    if with_room:
        siblings = Unit.objects.filter(parent_id=budget_request.unit.parent_id).exclude(pk=budget_request.unit_id)
        form, key = TakeRoomForm(request.POST, siblings=siblings.order_by("name"), auto_id="room_%s"), "room"
    else:
        form, key = ApproveForm(request.POST, auto_id="approve_%s"), "approve"

    def act(target, form):
        return services.budget_request_approve(
            request=target, approver=request.user, share=form.cleaned_data.get("share"),
            comment=form.cleaned_data.get("comment", ""),
            take_from=form.take_from() if with_room else None,
        )

    return _decide(
        request, pk, key, form, act,
        lambda done: f"Request #{done.pk} approved: {done.unit.name} gets {done.granted_percent.normalize():f} %.",
    )


@login_required
@require_POST
def request_deny(request, pk):
    def act(target, form):
        return services.budget_request_deny(request=target, decider=request.user, comment=form.cleaned_data["comment"])

    form = DenyForm(request.POST, auto_id="deny_%s")
    return _decide(request, pk, "deny", form, act, lambda done: f"Request #{done.pk} denied.")


@login_required
@require_POST
def request_escalate(request, pk):
    def act(target, form):
        return services.budget_request_escalate(
            request=target, decider=request.user, comment=form.cleaned_data.get("comment", ""),
        )

    return _decide(
        request, pk, "escalate", EscalateForm(request.POST, auto_id="escalate_%s"), act,
        lambda done: f"Escalated as request #{done.pk}: {done.unit.name} asks {_decided_by(done)} "
                     f"for {done.requested_percent.normalize():f} %.",
    )


@login_required
@require_POST
def request_cancel(request, pk):
    budget_request = _visible_request(request, pk)
    try:
        services.budget_request_cancel(request=budget_request, user=request.user)  # PermissionDenied → 403
    except ValidationError as error:
        messages.error(request, " ".join(m for ms in error.message_dict.values() for m in ms))
    else:
        messages.success(request, f"Request #{budget_request.pk} cancelled.")
    return redirect("budget-request-detail", pk=pk)


@login_required
def shares_edit(request, name=None):
    """A manager sets the shares of the children of a unit they manage (operators: the top-level units)."""
    parent = get_object_or_404(Unit, name=name) if name else None
    cluster = _cluster(request)
    if cluster is None:
        raise Http404("no cluster yet")
    if not can_edit_shares(request.user, parent):
        raise PermissionDenied(
            f"only managers of {parent.name} may set its children's shares" if parent
            else "only operators may set the shares of the top-level units"
        )
    now = timezone.now()
    children = list(Unit.objects.filter(parent=parent).order_by("name"))
    tree = {row.unit.pk: row for row in budget_tree(cluster, now=now)}
    if request.method == "POST":
        form = SharesForm(request.POST, children=children)
        if form.is_valid():
            try:
                changes = services.allocation_set_shares(
                    parent=parent, cluster=cluster, shares=form.shares(), actor=request.user,
                    reason=form.cleaned_data["reason"],
                )
            except ValidationError as error:
                add_service_errors(form, error, aliases={child.name: f"share-{child.name}" for child in children})
            else:
                if changes:
                    messages.success(request, "Shares saved: " + ", ".join(
                        f"{change.unit.name} {_pct(change.before_percent)} → {_pct(change.after_percent)}"
                        for change in changes
                    ) + ".")
                else:
                    messages.info(request, "Nothing changed.")
                target = reverse("budget-unit", args=[parent.name]) if parent else reverse("budget-overview")
                return redirect(f"{target}?cluster={cluster.name}")
    else:
        form = SharesForm(
            children=children,
            initial={f"share-{child.name}": tree[child.pk].percent_of_parent for child in children},
        )
    rows = [
        {
            "row": tree[child.pk], "field": form[f"share-{child.name}"],
            "schedule": [p for p in selectors.scheduled_periods(child, cluster, now=now) if p.valid_from > now
                         or p.valid_to is not None],
        }
        for child in children
    ]
    return render(request, "budgets/shares_form.html", {
        "parent": parent, "parent_row": tree.get(parent.pk) if parent else None, "cluster": cluster,
        "clusters": Cluster.objects.all(), "form": form, "rows": rows, "now": now,
    })


def _pct(value) -> str:
    return "none" if value is None else f"{value.normalize():f} %"
