"""The plain HTTP side of the server: the page, its static files, what the agent can talk
about (``/page.json``, read by the page before any call), ``/healthz`` (alive), ``/readyz``
(takes a new call: 200, or 503 with the reason), ``/metrics`` and the
routes each websocket transport declares beside its websocket (Twilio's TwiML webhook) — and
the access checks of the websockets.

``websockets`` reads every request's head; ``respond`` answers those that are not a
websocket with a whole response, and lets a websocket's handshake go on only once its
request passed the check its transport declared (``web/transports/entry.py``), so one port
serves both and no second HTTP framework is needed. Every path answers ``GET`` (and
``HEAD``); a route a transport declares may also take ``POST`` with a form-encoded body —
Twilio's webhook, as Twilio sends it — which ``BodyReadingConnection``
(``web/request_body.py``) lifts off the wire before ``websockets`` parses the head. Any other
method gets 405.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from cadence.web.access import AccessPolicy, Refusal
from cadence.web.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from cadence.web.metrics import ServerMetrics

logger = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".ico": "image/x-icon",
}
"""The only kinds of file the page is made of; anything else under ``static/`` is not served."""

FAVICON = "favicon.svg"
"""The page's icon, also answered at ``/favicon.ico``, where browsers and other clients look
for one without being told."""


FORM = "application/x-www-form-urlencoded"
"""The only kind of body a route takes: what Twilio's webhooks send."""

READ_METHODS = frozenset({"GET", "HEAD"})

AccessCheck = Callable[[AccessPolicy, Request], Refusal | None]
"""Whether a request may have what it asks for: ``None``, or why it is turned away. Run on
the request's head, before a websocket's handshake — a refused client never reaches a call."""

Form = Mapping[str, Sequence[str]]
"""A POST's form parameters by name, each with its values in the order sent (blank values
kept: Twilio signs them too); empty for a ``GET``."""


@dataclass(frozen=True)
class HTTPRoute:
    """A plain HTTP answer on a path of its own, behind its own access check: a webhook a
    transport's provider fetches."""

    check: Callable[[AccessPolicy, Request, Form], Refusal | None]
    respond: Callable[[AccessPolicy, Request, Form], Response]
    """The answer to a request that passed ``check``."""
    methods: frozenset[str] = field(default=READ_METHODS)
    """The methods it answers; ``POST`` takes a form-encoded body."""


def response(status: HTTPStatus, body: bytes, content_type: str) -> Response:
    headers = Headers()
    headers["Content-Type"] = content_type
    headers["Content-Length"] = str(len(body))
    headers["Cache-Control"] = "no-store"  # a demo being edited must never show a stale page
    headers["X-Content-Type-Options"] = "nosniff"
    headers["Referrer-Policy"] = "no-referrer"  # a page opened with ?token=… keeps it to itself
    return Response(status.value, status.phrase, headers, body)


def text_response(status: HTTPStatus, text: str) -> Response:
    return response(status, f"{text}\n".encode(), "text/plain; charset=utf-8")


class Routes:
    """Answers the HTTP requests; ``None`` lets a websocket's handshake go on."""

    def __init__(
        self,
        *,
        websockets: Mapping[str, AccessCheck],
        http: Mapping[str, HTTPRoute],
        access: AccessPolicy,
        metrics: ServerMetrics,
        health: Callable[[], dict[str, object]],
        readiness: Callable[[], tuple[bool, dict[str, object]]],
        page: dict[str, object],
    ) -> None:
        """``websockets``: the check of each websocket the server routes, by its path;
        ``http``: the routes the transports declared beside them; ``page``: what the page
        shows a visitor before the call (``server.page``)."""
        self._websockets = dict(websockets)
        self._http = dict(http)
        self._access = access
        self._metrics = metrics
        self._health = health
        self._readiness = readiness
        self._page = json.dumps(page).encode()

    def respond(self, request: Request, peer: str = "?", body: bytes = b"") -> Response | None:
        """``body``: the request's, if it was a POST whose body was read."""
        raw = urlsplit(request.path).path
        if (check := self._websockets.get(raw)) is not None:
            if request.method != "GET":
                return not_allowed(request.method, frozenset({"GET"}))
            return self._refuse(check(self._access, request), raw, peer)
        answer = self._answer(request, raw, peer, body)
        if request.method == "HEAD":  # the same head, no body
            return Response(answer.status_code, answer.reason_phrase, answer.headers, b"")
        return answer

    def _answer(self, request: Request, raw: str, peer: str, body: bytes) -> Response:
        # The transports' routes by their path as sent, as the server dispatches the
        # websockets; the rest by the path it names.
        if (route := self._http.get(raw)) is not None:
            if request.method not in route.methods:
                return not_allowed(request.method, route.methods)
            form = read_form(request, body)
            if isinstance(form, Response):
                return form
            refusal = route.check(self._access, request, form)
            return self._refuse(refusal, raw, peer) or route.respond(self._access, request, form)
        if request.method not in READ_METHODS:
            return not_allowed(request.method, READ_METHODS)
        path = unquote(raw)
        if path == "/":
            return self._static("index.html")
        if path == "/favicon.ico":
            return self._static(FAVICON)
        if path.startswith("/static/"):
            return self._static(path.removeprefix("/static/"))
        if path == "/page.json":
            return response(HTTPStatus.OK, self._page, "application/json")
        if path == "/healthz":
            body = json.dumps(self._health()).encode()
            return response(HTTPStatus.OK, body, "application/json")
        if path == "/readyz":
            ready, state = self._readiness()
            status = HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE
            return response(status, json.dumps(state).encode(), "application/json")
        if path == "/metrics":
            return response(HTTPStatus.OK, self._metrics.render(), METRICS_CONTENT_TYPE)
        return text_response(HTTPStatus.NOT_FOUND, f"not found: {path}")

    def _refuse(self, refusal: Refusal | None, path: str, peer: str) -> Response | None:
        """The answer to a request ``refusal`` turns away (``None`` if it does not); logged
        with the path alone — a query may carry a token."""
        if refusal is None:
            return None
        logger.warning("refused %s from %s: %d %s", path, peer, refusal.status, refusal.reason)
        refused = text_response(refusal.status, refusal.reason)
        if refusal.status is HTTPStatus.UNAUTHORIZED:
            refused.headers["WWW-Authenticate"] = 'Bearer realm="cadence"'
        return refused

    def _static(self, name: str) -> Response:
        file = (STATIC_DIR / name).resolve()
        # `resolve` folds `..` and links, so this also refuses any way out of the folder.
        if (
            not file.is_relative_to(STATIC_DIR.resolve())
            or file.suffix not in CONTENT_TYPES
            or not file.is_file()
        ):
            return text_response(HTTPStatus.NOT_FOUND, f"not found: /static/{name}")
        return response(HTTPStatus.OK, file.read_bytes(), CONTENT_TYPES[file.suffix])


def not_allowed(method: str, allowed: frozenset[str]) -> Response:
    refused = text_response(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} is not served here")
    refused.headers["Allow"] = ", ".join(sorted(allowed))
    return refused


def read_form(request: Request, body: bytes) -> Form | Response:
    """A POST's form parameters, or the answer to a POST whose body is not a form (415), is
    missing or was not read (400: none, or over ``web/request_body.py``'s ``MAX_BODY_BYTES``, which
    ``websockets`` refuses before this), or is not UTF-8 (400). Empty for any other method."""
    if request.method != "POST":
        return {}
    kind = request.headers.get("Content-Type", "").partition(";")[0].strip().lower()
    if kind != FORM:
        return text_response(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, f"expected {FORM}")
    if not body:
        return text_response(HTTPStatus.BAD_REQUEST, "a POST here carries a form")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return text_response(HTTPStatus.BAD_REQUEST, "the form is not UTF-8")
    return parse_qs(text, keep_blank_values=True)
