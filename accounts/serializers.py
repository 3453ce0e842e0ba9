from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from accounts.models import ApiToken


class TokenObtainSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, trim_whitespace=False, style={"input_type": "password"})
    name = serializers.CharField(max_length=100, required=False, allow_blank=True, default="",
                                 help_text="What the token is for (shown in your token list).")


class TokenIssuedSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="The key: shown this once, send it as `Authorization: Token <key>`.")
    id = serializers.IntegerField()
    name = serializers.CharField()
    expires_at = serializers.DateTimeField()


class ApiTokenSerializer(serializers.ModelSerializer):
    state = serializers.CharField(help_text="active, expired or revoked")
    current = serializers.SerializerMethodField()

    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "state", "current", "created_at", "expires_at", "last_used_at",
                  "revoked_at", "revoked_by", "revoke_reason"]

    @extend_schema_field(serializers.BooleanField())
    def get_current(self, token) -> bool:
        """The token this request was made with."""
        auth = self.context.get("auth")
        return isinstance(auth, ApiToken) and auth.pk == token.pk
