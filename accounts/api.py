"""The token endpoints: log in for a token, list yours, revoke one, log out (revoke the one in use)."""

from django.contrib.auth import authenticate, user_logged_in
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.lockout import lockout_response
from accounts.models import ApiToken
from accounts.selectors import tokens_of
from accounts.serializers import ApiTokenSerializer, TokenIssuedSerializer, TokenObtainSerializer
from accounts.services import token_create, token_revoke
from accounts.throttles import AddressThrottle, LoginThrottle
from config.converters import ID_REGEX


@extend_schema(tags=["auth"], request=TokenObtainSerializer, responses=TokenIssuedSerializer)
class TokenObtainView(APIView):
    """A new token for every login (`{"token": ...}`, FORMATS.md), valid until `expires_at` or revoked.

    Failed logins count per account and per address: past the limit, logins are locked for a while (429).
    """

    authentication_classes = []
    permission_classes = [AllowAny]
    throttle_classes = [LoginThrottle, AddressThrottle]

    def post(self, request):
        body = TokenObtainSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        # The Django request: the lockout (django-axes) counts this attempt like one on /login/.
        user = authenticate(request._request, username=body.validated_data["username"],
                            password=body.validated_data["password"])
        if getattr(request._request, "axes_locked_out", False):
            return lockout_response(request._request)
        if user is None:
            raise ValidationError({"non_field_errors": ["Unable to log in with provided credentials."]})
        # A login like the pages' (no session, though): last_login is kept, the failure count reset.
        user_logged_in.send(sender=user.__class__, request=request._request, user=user)
        token, key = token_create(user=user, name=body.validated_data["name"] or "API login")
        return Response({"token": key, "id": token.pk, "name": token.name, "expires_at": token.expires_at})


@extend_schema(tags=["auth"])
class TokenViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin,
                   viewsets.GenericViewSet):
    """Your API tokens (active, expired and revoked); DELETE revokes one, `logout` the one in use."""

    serializer_class = ApiTokenSerializer
    queryset = ApiToken.objects.none()
    lookup_value_regex = ID_REGEX

    def get_queryset(self):
        return tokens_of(self.request.user)

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "auth": self.request.auth}

    def get_object(self):
        token = self.get_queryset().filter(pk=int(self.kwargs["pk"])).first()
        if token is None:
            raise NotFound(f"you have no token {self.kwargs['pk']}")
        return token

    @extend_schema(responses={200: ApiTokenSerializer})  # DELETE defaults to 204 in the schema; it answers 200
    def destroy(self, request, *args, **kwargs):
        token = self.get_object()
        token_revoke(token=token, actor=request.user, reason="revoked through the API")
        token.refresh_from_db()
        return Response(self.get_serializer(token).data, status=status.HTTP_200_OK)

    @extend_schema(request=None, responses=ApiTokenSerializer)
    @action(detail=False, methods=["post"])
    def logout(self, request):
        """Revoke the token this request is made with (what `allot logout` does)."""
        if not isinstance(request.auth, ApiToken):
            raise ValidationError({"non_field_errors": ["this request carries no API token to revoke"]})
        token_revoke(token=request.auth, actor=request.user, reason="logged out")
        request.auth.refresh_from_db()
        return Response(self.get_serializer(request.auth).data)
