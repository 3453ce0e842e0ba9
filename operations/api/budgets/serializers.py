from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from budgets.models import BudgetRequest, Unit, WhatIf
from budgets.permissions import can_decide
from topology.models import Cluster


class UnitSerializer(serializers.ModelSerializer):
    parent = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    children = serializers.SerializerMethodField()
    managers = serializers.SerializerMethodField()
    members = serializers.SerializerMethodField()
    shares = serializers.SerializerMethodField()

    class Meta:
        model = Unit
        fields = ["name", "description", "parent", "children", "managers", "members", "shares"]

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_children(self, unit):
        return self.context["children"].get(unit.pk, [])

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_managers(self, unit):
        return self.context["people"].get(unit.pk, {}).get("manager", [])

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_members(self, unit):
        return self.context["people"].get(unit.pk, {}).get("member", [])

    @extend_schema_field(serializers.DictField(child=serializers.DictField()))
    def get_shares(self, unit):
        """Per cluster: percent of parent, fraction of the cluster, GPU-hours per week."""
        return self.context["shares"].get(unit.pk, {})


SHARE_FIELD = {"max_digits": 5, "decimal_places": 2, "min_value": 0, "max_value": 100, "coerce_to_string": False}


class BudgetRequestSerializer(serializers.ModelSerializer):
    """A budget request as its requester and deciders see it."""

    unit = serializers.SlugRelatedField(slug_field="name", read_only=True)
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    requested_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    share = serializers.DecimalField(source="requested_percent", read_only=True, **SHARE_FIELD)
    granted_share = serializers.DecimalField(source="granted_percent", read_only=True, allow_null=True, **SHARE_FIELD)
    decided_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    decider = serializers.SerializerMethodField()
    allocation = serializers.SerializerMethodField()
    escalations = serializers.PrimaryKeyRelatedField(many=True, read_only=True)
    can_decide = serializers.SerializerMethodField()

    class Meta:
        model = BudgetRequest
        fields = [
            "id", "unit", "cluster", "requested_by", "share", "starts_at", "ends_at", "justification", "status",
            "created_at", "decider", "granted_share", "decided_by", "decided_at", "comment", "allocation",
            "escalated_from", "escalations", "can_decide",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_decider(self, budget_request):
        """Whose managers decide: a unit's name, or "operators" at the top of the tree."""
        return budget_request.decider_unit.name if budget_request.decider_unit else "operators"

    @extend_schema_field(serializers.DictField(allow_null=True))
    def get_allocation(self, budget_request):
        allocation = budget_request.allocation
        if allocation is None:
            return None
        return {
            "share": float(allocation.share_percent), "valid_from": allocation.valid_from,
            "valid_to": allocation.valid_to, "time_limited": allocation.temporary,
        }

    @extend_schema_field(serializers.BooleanField())
    def get_can_decide(self, budget_request):
        request = self.context.get("request")
        return bool(request and budget_request.status == "pending" and can_decide(request.user, budget_request))


class BudgetRequestCreateSerializer(serializers.Serializer):
    unit = serializers.SlugRelatedField(slug_field="name", queryset=Unit.objects.all())
    cluster = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    share = serializers.DecimalField(**SHARE_FIELD, help_text="Percent of the parent unit's share.")
    starts_at = serializers.DateTimeField(required=False, allow_null=True)
    ends_at = serializers.DateTimeField(required=False, allow_null=True)
    justification = serializers.CharField(max_length=2000)


class ApproveSerializer(serializers.Serializer):
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
    share = serializers.DecimalField(
        **SHARE_FIELD, required=False, allow_null=True, help_text="Approve a different amount (then comment why).",
    )
    take_from = serializers.DictField(
        child=serializers.DecimalField(**SHARE_FIELD), required=False,
        help_text="Sibling name → its new, lower share, to make room (for the grant's period).",
    )


class DenySerializer(serializers.Serializer):
    comment = serializers.CharField(max_length=2000)


class EscalateSerializer(serializers.Serializer):
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class SharesSerializer(serializers.Serializer):
    cluster = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    shares = serializers.DictField(
        child=serializers.DecimalField(**SHARE_FIELD, allow_null=True),
        help_text="Child unit name → its share in percent of this unit (null: no allocation).",
    )
    reason = serializers.CharField(max_length=2000)


class WhatIfRunSerializer(serializers.Serializer):
    share = serializers.DecimalField(
        **SHARE_FIELD, required=False, allow_null=True,
        help_text="The unit's share to try, percent of its parent; default: the share asked.",
    )
    force = serializers.BooleanField(
        required=False, default=False, help_text="Simulate again although a result for this state exists.",
    )


class WhatIfSerializer(serializers.ModelSerializer):
    """A what-if: the next 7 days simulated without and with the request's change (operations/whatif/)."""

    request = serializers.PrimaryKeyRelatedField(source="budget_request", read_only=True)
    requested_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    share = serializers.DecimalField(source="share_percent", read_only=True, **SHARE_FIELD)
    assumptions = serializers.DictField(
        read_only=True, help_text="What the simulation took as given: horizon, snapshot time, jobs, arrivals "
                                  "replayed, durations, shares before and after, and `notes` in words.",
    )
    results = serializers.DictField(
        read_only=True, help_text="`units`: per affected unit (role requesting, sibling, parent), `without` and "
                                  "`with`: share, entitled and used GPU-hours, usage_ratio, wait_p50, wait_p90 "
                                  "(seconds), jobs; `cluster`: occupancy and waits on both sides. Empty until done.",
    )
    log = serializers.ListField(
        child=serializers.DictField(), read_only=True, help_text="Each status change: at, status, actor, reason.",
    )

    class Meta:
        model = WhatIf
        fields = [
            "id", "request", "status", "share", "requested_by", "created_at", "started_at", "finished_at", "error",
            "assumptions", "results", "log",
        ]
        read_only_fields = fields
