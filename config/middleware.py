"""Request guards that apply to every view.

PostgreSQL text columns cannot hold NUL bytes, so a value such as
``?state=%00`` — or a form or JSON field holding one, even one only used to
look a row up — would otherwise reach the database and fail there. Such input
is refused up front with a 400 that names the field.
"""

import json

from django.http import HttpResponseBadRequest, JsonResponse

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def _nul_in_json(value, path: str = "") -> str | None:
    """The path of the first key or string holding a NUL, or None."""
    if isinstance(value, str):
        return path or "body" if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if "\x00" in str(key):
                return where
            found = _nul_in_json(item, where)
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _nul_in_json(item, f"{path}[{index}]")
            if found:
                return found
    return None


class RejectNulBytesMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        name = self._field_with_nul(request)
        if name is not None:
            return self._refuse(request, name.replace("\x00", "\\0"))
        return self.get_response(request)

    @staticmethod
    def _field_with_nul(request) -> str | None:
        fields = list(request.GET.lists())
        content_type = request.content_type or ""
        if request.method in ("POST", "PUT", "PATCH"):
            if content_type in FORM_TYPES:
                fields += list(request.POST.lists())
            elif content_type == "application/json" and b"\\u0000" in request.body:
                try:
                    return _nul_in_json(json.loads(request.body))
                except ValueError:
                    return None  # not JSON: the parser says so with its own 400
        for key, values in fields:
            if "\x00" in key or any("\x00" in value for value in values):
                return key
        return None

    @staticmethod
    def _refuse(request, name):
        message = f"Null characters are not allowed: {name!r} holds a NUL byte."
        if request.path.startswith("/api/"):
            # The shape of DRF's validation errors: {field: [messages]}.
            return JsonResponse({name: [message]}, status=400)
        return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")
