from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.response import Response
from rest_framework.settings import api_settings

from accounts.throttles import WhatIfRequestThrottle, WhatIfUserThrottle
from budgets import selectors, services
from budgets.models import BudgetRequest, Unit
from budgets.selectors import HOURS_PER_WEEK, people_by_unit, unit_shares
from config.converters import ID_REGEX
from operations import whatif
from operations.api.budgets.serializers import (
    ApproveSerializer,
    BudgetRequestCreateSerializer,
    BudgetRequestSerializer,
    DenySerializer,
    EscalateSerializer,
    SharesSerializer,
    UnitSerializer,
    WhatIfRunSerializer,
    WhatIfSerializer,
)
from operations.selectors import budget_tree
from topology.models import Cluster


def _service(call):
    """Run a service; its {field: [message]} refusals become a 400 with the same body."""
    try:
        return call()
    except DjangoValidationError as error:
        if hasattr(error, "error_dict"):
            raise ValidationError(error.message_dict)
        raise ValidationError({"non_field_errors": error.messages})


def _budget(row) -> dict:
    return {
        "unit": row.unit.name,
        "share": float(row.percent_of_parent) if row.percent_of_parent is not None else None,
        "fraction_of_cluster": round(row.fraction_of_cluster, 6),
        "gpu_hours_per_week": round(row.gpu_hours_per_week, 1),
        "entitled_gpu_hours": round(row.entitled_gpu_hours, 1),
        "usage_gpu_hours": round(row.usage_gpu_hours, 3),
        "unallocated_gpu_hours": round(row.unallocated_gpu_hours, 3),
        "ratio": round(row.ratio, 4) if row.ratio is not None else None,
        "pending_gpus": row.pending_gpus,
        "pending_unallocated_gpus": row.pending_unallocated_gpus,
        "children_share": float(row.children_percent),
        "open_requests": row.open_requests,
    }


class UnitViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = Unit.objects.select_related("parent")
    serializer_class = UnitSerializer
    lookup_field = "name"
    lookup_value_regex = "[-a-zA-Z0-9_]+"

    def get_serializer_context(self):
        context = super().get_serializer_context()
        if self.action not in ("list", "retrieve"):
            return context
        children: dict[int, list[str]] = {}
        for parent_id, name in Unit.objects.filter(parent__isnull=False).values_list("parent_id", "name"):
            children.setdefault(parent_id, []).append(name)
        shares: dict[int, dict] = {}
        for cluster in Cluster.objects.all():
            gpus = cluster.schedulable_gpus()
            for node in unit_shares(cluster, gpus):
                if node.percent_of_parent is None:
                    continue
                shares.setdefault(node.unit.pk, {})[cluster.name] = {
                    "percent_of_parent": float(node.percent_of_parent),
                    "fraction_of_cluster": round(node.fraction_of_cluster, 6),
                    "gpu_hours_per_week": round(node.fraction_of_cluster * gpus * HOURS_PER_WEEK, 1),
                }
        context.update(children=children, people=people_by_unit(), shares=shares)
        return context

    def _cluster(self, name):
        if name:
            cluster = Cluster.objects.filter(name=name).first()
            if cluster is None:
                raise ValidationError({"cluster": [f"no cluster named {name!r}"]})
            return cluster
        clusters = list(Cluster.objects.all()[:2])
        if len(clusters) != 1:
            raise ValidationError({"cluster": ["required: the cluster's name (?cluster=)"]})
        return clusters[0]

    @extend_schema(
        parameters=[OpenApiParameter("cluster", str, description="cluster name (optional with one cluster)")],
        responses=inline_serializer("UnitUsage", {
            "cluster": serializers.CharField(), "window_seconds": serializers.IntegerField(),
            "schedulable_gpus": serializers.IntegerField(), "healthy_gpus": serializers.IntegerField(),
            "unit": serializers.DictField(),
            "children": serializers.ListField(child=serializers.DictField()),
        }),
    )
    @action(detail=True, methods=["get"])
    def usage(self, request, name=None):
        """Share, entitlement, usage and usage ratio over the fair-share window, for the unit and each child."""
        unit = self.get_object()
        cluster = self._cluster(request.query_params.get("cluster"))
        now = timezone.now()
        gpus = cluster.schedulable_gpus()
        tree = budget_tree(cluster, now=now, schedulable_gpus=gpus)
        by_id = {row.unit.pk: row for row in tree}
        return Response({
            "cluster": cluster.name, "at": now, "window_seconds": cluster.window_seconds,
            # Entitlements are shares of the schedulable GPUs; `healthy_gpus` (in service: up or draining) is
            # kept for clients written before that was said.
            "schedulable_gpus": gpus, "healthy_gpus": cluster.gpu_counts()["healthy"],
            **_budget(by_id[unit.pk]),
            "parent": unit.parent.name if unit.parent else None,
            "children": [_budget(row) for row in tree if row.unit.parent_id == unit.pk],
        })

    @extend_schema(request=SharesSerializer, responses=inline_serializer("SharesChanged", {
        "changes": serializers.ListField(child=serializers.DictField()),
    }))
    @action(detail=True, methods=["post"])
    def shares(self, request, name=None):
        """A manager of this unit sets its children's shares (percent of this unit), with a reason."""
        parent = self.get_object()
        body = SharesSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        children = {child.name: child for child in Unit.objects.filter(parent=parent)}
        unknown = sorted(set(body.validated_data["shares"]) - set(children))
        if unknown:
            raise ValidationError({"shares": [f"{', '.join(unknown)}: not a child of {parent.name}"]})
        changes = _service(lambda: services.allocation_set_shares(
            parent=parent, cluster=body.validated_data["cluster"], actor=request.user,
            shares={children[name]: value for name, value in body.validated_data["shares"].items()},
            reason=body.validated_data["reason"],
        ))
        return Response({"changes": [
            {"unit": change.unit.name, "before": _float(change.before_percent), "after": _float(change.after_percent),
             "valid_from": change.valid_from, "valid_to": change.valid_to, "actor": change.actor,
             "reason": change.reason}
            for change in changes
        ]})


def _float(value):
    return float(value) if value is not None else None


class BudgetRequestViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Budget requests: a user sees their own and those they may decide.

    Filters: `?status=`, `?unit=`, `?cluster=`, `?waiting=1` (pending, waiting for you), `?mine=1`.
    """

    queryset = BudgetRequest.objects.all()
    serializer_class = BudgetRequestSerializer
    lookup_value_regex = ID_REGEX

    def get_queryset(self):
        user, params = self.request.user, self.request.query_params
        queryset = selectors.waiting_for(user) if params.get("waiting") else selectors.visible_requests(user)
        queryset = queryset.select_related("allocation").prefetch_related("escalations")
        if params.get("mine"):
            queryset = queryset.filter(requested_by=user)
        for key, lookup in (("status", "status"), ("unit", "unit__name"), ("cluster", "cluster__name")):
            if params.get(key):
                queryset = queryset.filter(**{lookup: params[key]})
        return queryset

    def _respond(self, budget_request, code=status.HTTP_200_OK):
        fresh = BudgetRequest.objects.select_related(
            "unit", "cluster", "requested_by", "decided_by", "decider_unit", "allocation",
        ).get(pk=budget_request.pk)
        return Response(self.get_serializer(fresh).data, status=code)

    @extend_schema(request=BudgetRequestCreateSerializer, responses={201: BudgetRequestSerializer})
    def create(self, request, *args, **kwargs):
        body = BudgetRequestCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        created = _service(lambda: services.budget_request_create(user=request.user, **body.validated_data))
        return self._respond(created, status.HTTP_201_CREATED)

    @extend_schema(request=ApproveSerializer, responses=BudgetRequestSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        """Approve, or approve a different amount (`share`); `take_from` lowers siblings to make room."""
        target = self.get_object()
        body = ApproveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        names = body.validated_data.get("take_from") or {}
        siblings = {unit.name: unit for unit in Unit.objects.filter(name__in=names)}
        missing = sorted(set(names) - set(siblings))
        if missing:
            raise ValidationError({"take_from": [f"no unit named {', '.join(missing)}"]})
        done = _service(lambda: services.budget_request_approve(
            request=target, approver=request.user, comment=body.validated_data["comment"],
            share=body.validated_data.get("share"),
            take_from={siblings[name]: value for name, value in names.items()},
        ))
        return self._respond(done)

    @extend_schema(request=DenySerializer, responses=BudgetRequestSerializer)
    @action(detail=True, methods=["post"])
    def deny(self, request, pk=None):
        target = self.get_object()
        body = DenySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        done = _service(lambda: services.budget_request_deny(
            request=target, decider=request.user, comment=body.validated_data["comment"],
        ))
        return self._respond(done)

    @extend_schema(request=EscalateSerializer, responses={201: BudgetRequestSerializer})
    @action(detail=True, methods=["post"])
    def escalate(self, request, pk=None):
        """No room under the parent: ask one level up for the parent to grow. Returns the new request."""
        target = self.get_object()
        body = EscalateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        created = _service(lambda: services.budget_request_escalate(
            request=target, decider=request.user, comment=body.validated_data["comment"],
        ))
        return self._respond(created, status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=BudgetRequestSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        target = self.get_object()
        done = _service(lambda: services.budget_request_cancel(request=target, user=request.user))
        return self._respond(done)

    @extend_schema(
        methods=["get"], request=None, responses=WhatIfSerializer,
        description="The request's latest what-if, whatever its status (404 while none has run).",
    )
    @extend_schema(
        methods=["post"], request=WhatIfRunSerializer,
        responses={200: WhatIfSerializer, 201: WhatIfSerializer},
        description=(
            "Simulate the next 7 days without and with the change (optionally at another `share`). 201: a new "
            "what-if, done already when tasks run in-process, else queued (poll GET). 200: a result for the "
            "cluster as it is this hour exists and is returned (`force` simulates anew). Open requests only."
        ),
    )
    @action(detail=True, methods=["get", "post"], url_path="what-if", url_name="what-if",
            throttle_classes=[*api_settings.DEFAULT_THROTTLE_CLASSES, WhatIfUserThrottle, WhatIfRequestThrottle])
    def what_if(self, request, pk=None):
        target = self.get_object()
        if request.method == "GET":
            latest = selectors.latest_what_if(target)
            if latest is None:
                raise NotFound(f"no what-if has run for request #{target.pk} yet; POST here to run one")
            return Response(WhatIfSerializer(latest).data)
        body = WhatIfRunSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        found, created = _service(lambda: whatif.what_if_submit(
            budget_request=target, user=request.user, share=body.validated_data.get("share"),
            force=body.validated_data["force"],
        ))
        return Response(WhatIfSerializer(found).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)
