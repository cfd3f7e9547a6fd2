"""Request hygiene that applies to every page and endpoint."""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse

from core.text import BIDI_CONTROLS, strip_bidi_controls

_FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


class RejectNulBytesMiddleware:
    """Answer 400 to a request whose query string or form fields contain a NUL byte.

    PostgreSQL text cannot hold NUL, so a NUL that reaches a filter raises ``DataError`` deep in
    the ORM (a 500). No field of this platform legitimately carries one, so refuse the request at
    the door, once, instead of guarding every filter and every JSON field.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if b"\x00" in unquote_to_bytes(request.META.get("QUERY_STRING", "")):
            return _bad_request(request, "query string")
        if request.method not in ("GET", "HEAD", "OPTIONS") and request.content_type == "application/json":
            # JSON may spell NUL as \u0000; PostgreSQL's jsonb and text refuse it either way.
            body = request.body
            if b"\x00" in body or b"\\u0000" in body:
                return _bad_request(request, "JSON body")
        if request.method not in ("GET", "HEAD", "OPTIONS") and request.content_type in _FORM_TYPES:
            try:
                fields = list(request.POST.lists())
            except Exception:  # noqa: BLE001 - a malformed body is the form layer's 400, not ours
                fields = []
            for name, values in fields:
                if "\x00" in name or any("\x00" in v for v in values):
                    return _bad_request(request, f"form field {name.replace(chr(0), '')!r}")
        return self.get_response(request)


def _bad_request(request: HttpRequest, where: str) -> HttpResponse:
    message = f"The {where} contains a NUL byte (\\x00), which no field accepts."
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": message}, status=400)
    return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")


class NeutraliseBidiControlsMiddleware:
    """Strip bidirectional control characters from every HTML page.

    Input refuses them (``core.text``), but rows stored before that check, or written outside
    the services, may hold them; a name with U+202E renders reversed wherever a template prints it.
    Pages never need them (right-to-left text displays correctly without), so removing them at the
    one place every page passes through covers every template and every field at once.
    """

    _BIDI = tuple(BIDI_CONTROLS)

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.streaming or not response.get("Content-Type", "").startswith("text/html"):
            return response
        charset = response.charset or "utf-8"
        try:
            text = response.content.decode(charset)
        except (UnicodeDecodeError, LookupError):
            return response
        if any(c in text for c in self._BIDI):
            response.content = strip_bidi_controls(text).encode(charset)
            if response.has_header("Content-Length"):
                response["Content-Length"] = str(len(response.content))
        return response
