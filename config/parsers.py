"""DRF's JSON parser, taking the document the input boundary already decoded and checked (config/middleware.py)."""

from rest_framework.parsers import JSONParser


class BoundaryJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        request = (parser_context or {}).get("request")
        django_request = getattr(request, "_request", None)
        if hasattr(django_request, "boundary_json"):
            return django_request.boundary_json
        return super().parse(stream, media_type, parser_context)
