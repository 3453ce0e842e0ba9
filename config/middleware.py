"""Request guards that apply to every view.

PostgreSQL text columns cannot hold NUL bytes, so a query string such as
``?state=%00`` would otherwise reach the database and fail there. Such input
is refused up front with a 400 that names the parameter.
"""

from django.http import HttpResponseBadRequest, JsonResponse


class RejectNulBytesMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        for key, values in request.GET.lists():
            if "\x00" in key or any("\x00" in value for value in values):
                return self._refuse(request, key.replace("\x00", "\\0"))
        return self.get_response(request)

    @staticmethod
    def _refuse(request, name):
        message = f"query parameter {name!r} contains a NUL byte, which is not allowed"
        if request.path.startswith("/api/"):
            return JsonResponse({"detail": message, "field": name}, status=400)
        return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")
