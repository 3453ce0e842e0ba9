from accounts.models import ApiToken


def tokens_of(user):
    """A user's tokens, newest first: active, expired and revoked (the list is also their history)."""
    return ApiToken.objects.filter(user=user).order_by("-created_at", "-id")
