from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from budgets.models import Unit


class UnitSerializer(serializers.ModelSerializer):
    parent = serializers.SlugRelatedField(slug_field="name", read_only=True)
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
