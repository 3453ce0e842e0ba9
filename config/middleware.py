"""The input boundary: every request passes here before any view, form, parser or lookup sees it.

A request body is read and decoded once, whatever charset it declares; a JSON
body is parsed here (DRF's parser takes the result: config/parsers.py) with
its nesting, its integers and its size bounded; and every string that arrives
— query parameters, form fields, JSON keys and values — is refused with a 400
naming the field when it holds a character no text field of Allot stores:

- NUL, which PostgreSQL text columns cannot hold (a lookup with one fails
  there rather than finding nothing), and the other C0 controls and DEL, which
  are terminal escapes on the way out. Tab, newline and carriage return are
  allowed only in the fields that hold multi-line text (MULTILINE_FIELDS).
- the bidirectional overrides and isolates (U+202A–U+202E, U+2066–U+2069),
  which make a name shown on a page read differently from what it is.

Refusals under /api/ have DRF's shapes: `{field: [message]}` for a field,
`{"detail": message}` for the body as a whole; pages get plain text.
Cookies holding controls are dropped (as if absent), and an `Authorization`
header that is not printable ASCII is a 401.
"""

import codecs
import json
import math
import re

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.http import HttpResponse, JsonResponse

from config.text import MULTILINE_FORBIDDEN, SINGLE_LINE_FORBIDDEN, describe

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
JSON_TYPE = "application/json"
MAX_JSON_DEPTH = 32
# The database's integer range (PostgreSQL bigint, SQLite INTEGER): nothing wider reaches a column or lookup.
MIN_INTEGER, MAX_INTEGER = -(2**63), 2**63 - 1
# Fields that hold multi-line text: tab, newline and carriage return are allowed there, nowhere else.
MULTILINE_FIELDS = frozenset({"command", "justification", "comment", "reason", "detail", "description",
                              "output_tail", "env"})  # env: the Submit page's NAME=VALUE lines
# Every value under these keys is multi-line text too (a job's environment).
MULTILINE_CONTAINERS = frozenset({"env"})
# The agent's reports carry process output as it was printed (colours and all): only NUL is refused there,
# and not even that in the output itself, nor a number out of range: the heartbeat checks each process entry
# on its own, cleans its output and refuses a bad entry by name while applying the others (a host must not go
# down over one job's output).
RAW_TEXT_PATHS = ("/api/v1/agent/heartbeat/",)
RAW_CLEANED_FIELDS = frozenset({"output_tail"})

RAW_FORBIDDEN = re.compile("\x00")
_PRINTABLE_HEADER = re.compile(r"[\x20-\x7e]*")
NOT_FINITE = ("NaN", "Infinity", "-Infinity")


class Refusal(Exception):
    """Input refused at the boundary: `field` (None for the whole body), the message, the HTTP status."""

    def __init__(self, message: str, *, field: str | None = None, status: int = 400):
        self.field, self.message, self.status = field, message, status
        super().__init__(message)


def check_text(value: str, field: str, *, multiline: bool = False, raw: bool = False) -> None:
    pattern = RAW_FORBIDDEN if raw else MULTILINE_FORBIDDEN if multiline else SINGLE_LINE_FORBIDDEN
    found = pattern.search(value)
    if found:
        if found.group() == "\x00":
            # The words the API has always used for a NUL (clients and tests look for them).
            raise Refusal(f"Null characters are not allowed: {field!r} holds a NUL byte.", field=field)
        where = "" if multiline or raw else " (a one-line field)"
        raise Refusal(f"{field!r} holds {describe(found.group())}{where}, at character {found.start() + 1}; "
                      "remove it.", field=field)


class _HugeNumber:
    """A JSON number beyond what any column holds, kept as text until its field is known."""

    def __init__(self, text: str):
        self.text = text

    def __str__(self) -> str:
        return self.text  # so a serializer's IntegerField can name it as out of range


def _parse_int(text: str):
    # More digits than 2**63 has cannot fit (and Python refuses to convert past 4300 digits anyway).
    return int(text) if len(text.lstrip("-")) <= 19 else _HugeNumber(text)


def _parse_constant(name: str):
    return _HugeNumber(name)  # NaN, Infinity, -Infinity: not JSON, and no column holds them


def check_json(value, *, raw: bool = False) -> None:
    """Walk a parsed JSON document (without recursion): nesting, integers and every key and string."""
    stack = [(value, "", 1, False, "")]
    while stack:
        item, path, depth, multiline, name = stack.pop()
        field = path or "body"
        if depth > MAX_JSON_DEPTH:
            raise Refusal(f"JSON nested deeper than {MAX_JSON_DEPTH} levels (at {field!r})")
        if isinstance(item, str):
            if not (raw and name in RAW_CLEANED_FIELDS):
                check_text(item, field, multiline=multiline, raw=raw)
        elif isinstance(item, bool) or item is None or (raw and isinstance(item, _HugeNumber)):
            continue
        elif isinstance(item, _HugeNumber) and item.text in NOT_FINITE:
            raise Refusal(f"{item.text} is not a number JSON allows: numbers must be finite", field=field)
        elif isinstance(item, _HugeNumber):
            raise Refusal(f"{item.text[:40]}{'…' if len(item.text) > 40 else ''} is out of range: numbers must "
                          f"be between {MIN_INTEGER} and {MAX_INTEGER}", field=field)
        elif isinstance(item, int):
            if not raw and not MIN_INTEGER <= item <= MAX_INTEGER:
                raise Refusal(f"{item} is out of range: numbers must be between {MIN_INTEGER} and {MAX_INTEGER}",
                              field=field)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise Refusal("numbers must be finite", field=field)
        elif isinstance(item, dict):
            for key, child in item.items():
                where = f"{path}.{key}" if path else str(key)
                check_text(str(key), where.replace("\x00", "\\0"), raw=raw)
                multiline_child = key in MULTILINE_FIELDS or name in MULTILINE_CONTAINERS
                stack.append((child, where, depth + 1, multiline_child, str(key)))
        elif isinstance(item, list):
            for index, child in enumerate(item):
                stack.append((child, f"{path}[{index}]", depth + 1, multiline, name))


def decode_body(body: bytes, charset: str | None) -> str:
    """The body as text in its declared charset (UTF-8 when none is declared; a UTF BOM wins)."""
    name = (charset or "utf-8").strip().strip('"').lower()
    try:
        codec = codecs.lookup(name)
    except LookupError:
        raise Refusal(f"charset {name!r} is not supported; send UTF-8 (or another standard charset such as "
                      "utf-16)", status=415)
    if codec.name == "utf-8" and body.startswith(codecs.BOM_UTF8):
        body = body[len(codecs.BOM_UTF8):]
    try:
        return body.decode(codec.name)
    except UnicodeDecodeError as error:
        raise Refusal(f"the body is not valid {name}: byte {error.start} cannot be decoded")


def parse_json(text: str):
    try:
        return json.loads(text, parse_int=_parse_int, parse_constant=_parse_constant)
    except RecursionError:
        raise Refusal(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    except ValueError as error:
        raise Refusal(f"JSON parse error - {error}")


class InputBoundaryMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            self._drop_bad_cookies(request)
            self._check_authorization(request)
            self._check(request)
        except Refusal as refusal:
            return self._refuse(request, refusal)
        return self.get_response(request)

    @staticmethod
    def _drop_bad_cookies(request):
        bad = [name for name, value in request.COOKIES.items() if SINGLE_LINE_FORBIDDEN.search(name + value)]
        if bad:
            request.COOKIES = {name: value for name, value in request.COOKIES.items() if name not in bad}

    @staticmethod
    def _check_authorization(request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        # The agent's scheme is checked by its own authentication class (scheduler/api/authentication.py).
        if header and not header.startswith("Agent ") and not _PRINTABLE_HEADER.fullmatch(header):
            raise Refusal("Invalid Authorization header: it must be printable ASCII (`Token <key>`).", status=401)

    def _check(self, request):
        raw = request.path.startswith(RAW_TEXT_PATHS)
        for key, values in request.GET.lists():
            check_text(key, key.replace("\x00", "\\0"), raw=raw)
            for value in values:
                check_text(value, key.replace("\x00", "\\0"), raw=raw)
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            raise Refusal("Content-Length must be a number of bytes")
        if limit is not None and length > limit:
            raise Refusal(f"the request body is {length} bytes; the limit is {limit} bytes "
                          f"({limit / 2**20:.1f} MiB)", status=413)
        if not length:
            return
        content_type = request.content_type or ""
        if content_type in FORM_TYPES:
            self._check_form(request, raw)
        elif content_type == JSON_TYPE:
            self._read_json(request, raw)

    @staticmethod
    def _check_form(request, raw):
        try:
            fields = list(request.POST.lists())
        except TooManyFieldsSent:
            raise Refusal(f"the form has more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} fields (the limit)")
        except RequestDataTooBig:
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            raise Refusal(f"the request body is over the limit of {limit} bytes", status=413)
        for key, values in fields:
            name = key.replace("\x00", "\\0")
            check_text(key, name, raw=raw)
            for value in values:
                check_text(value, name, multiline=key in MULTILINE_FIELDS, raw=raw)

    @staticmethod
    def _read_json(request, raw):
        text = decode_body(request.body, request.content_params.get("charset"))
        data = parse_json(text)
        check_json(data, raw=raw)
        if raw:
            # Numbers out of range are the heartbeat's to refuse, entry by entry: it gets them as numbers.
            try:
                data = json.loads(text)
            except ValueError as error:  # an integer of thousands of digits
                raise Refusal(f"JSON parse error - {error}")
        # Decoded once: the body the views and parsers see is this one, as UTF-8 with no charset to misread.
        request._body = text.encode("utf-8")
        request.META["CONTENT_TYPE"] = JSON_TYPE
        request.META["CONTENT_LENGTH"] = str(len(request._body))
        request.content_params = {}
        request.encoding = "utf-8"
        request.boundary_json = data

    @staticmethod
    def _refuse(request, refusal: Refusal):
        if request.path.startswith("/api/"):
            body = {refusal.field: [refusal.message]} if refusal.field else {"detail": refusal.message}
            response = JsonResponse(body, status=refusal.status)
        else:
            response = HttpResponse(refusal.message, status=refusal.status, content_type="text/plain; charset=utf-8")
        if refusal.status == 401:
            response["WWW-Authenticate"] = "Token"
        return response


class ContentSecurityPolicyMiddleware:
    """Every response says where its page may load from: this server only, no inline script.

    Pages use local scripts (htmx, Plotly, their own files under static/) and the API docs the Swagger UI
    bundled with drf-spectacular (its set-up script served as a file too). Inline `style` attributes stay
    allowed: the pages size bars with them and Plotly draws with them; a style attribute runs no code.
    """

    def __init__(self, get_response):
        self.get_response = get_response
        self.policy = settings.CONTENT_SECURITY_POLICY

    def __call__(self, request):
        response = self.get_response(request)
        if self.policy:
            response.setdefault("Content-Security-Policy", self.policy)
        return response
