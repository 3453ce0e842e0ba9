"""Error pages: JSON under /api/ (clients parse it), the site's layout elsewhere."""

from django.http import JsonResponse
from django.shortcuts import render
from django.urls import Resolver404
from django.views import defaults


def _is_api(request) -> bool:
    return request.path.startswith("/api/")


def not_found(request, exception=None):
    if _is_api(request):
        return JsonResponse({"detail": f"no such resource: {request.path}"}, status=404)
    if isinstance(exception, Resolver404) or not (exception and exception.args and isinstance(exception.args[0], str)):
        # An address no page answers (or no message): the page says so, not an exception's class name.
        return render(request, "404.html", {"request_path": request.path}, status=404)
    return defaults.page_not_found(request, exception)


def server_error(request):
    if _is_api(request):
        return JsonResponse({"detail": "the server failed; the error is logged"}, status=500)
    return defaults.server_error(request)


def bad_request(request, exception=None):
    if _is_api(request):
        return JsonResponse({"detail": "bad request"}, status=400)
    return defaults.bad_request(request, exception)


def permission_denied(request, exception=None):
    if _is_api(request):
        return JsonResponse({"detail": str(exception) or "not allowed"}, status=403)
    return defaults.permission_denied(request, exception)
