"""The one answer to a locked-out login (django-axes calls it): the token endpoint, /login/ and /admin/login/."""

from django.conf import settings
from django.http import JsonResponse
from django.shortcuts import render


def lockout_message() -> str:
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    return (f"Too many failed logins ({settings.AXES_FAILURE_LIMIT}) for this account or from this address: "
            f"logins are locked for {minutes} minutes. Wait, or ask an admin to unlock it.")


def lockout_response(request, original_response=None, credentials=None):
    if request.path.startswith("/api/"):
        response = JsonResponse({"detail": lockout_message()}, status=429)
    else:
        response = render(request, "accounts/locked_out.html", {"message": lockout_message()}, status=429)
    response["Retry-After"] = str(int(settings.AXES_COOLOFF_TIME.total_seconds()))
    return response
