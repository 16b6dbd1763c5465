"""The plain HTTP side of the server: the page, its static files, ``/healthz``,
``/metrics`` and the TwiML of the Twilio webhook — and the access checks of the websockets.

``websockets`` reads every request's head; ``respond`` answers those that are not a
websocket with a whole response, and lets a websocket's handshake go on only once its
request passed ``AccessPolicy``, so one port serves both and no second HTTP framework is
needed. Only ``GET`` is served (``websockets`` refuses other methods; Twilio can be told to
fetch its webhook with ``GET``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import quoteattr

from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from web.access import AccessPolicy, Refusal
from web.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from web.metrics import ServerMetrics

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
        signaling_path: str,
        twilio_path: str,
        access: AccessPolicy,
        metrics: ServerMetrics,
        health: Callable[[], dict[str, object]],
    ) -> None:
        self._signaling_path = signaling_path
        self._twilio_path = twilio_path
        self.twiml_path = f"{twilio_path.rstrip('/')}/twiml"
        self._access = access
        self._metrics = metrics
        self._health = health

    def respond(self, request: Request, peer: str = "?") -> Response | None:
        # The websockets by their path as sent, as the server dispatches them; the rest by
        # the path it names.
        raw = urlsplit(request.path).path
        if raw in (self._signaling_path, self._twilio_path):
            twilio = raw == self._twilio_path
            return self._refuse(self._access.websocket(request, twilio=twilio), raw, peer)
        if raw == self.twiml_path:
            return self._refuse(self._access.twiml(request), raw, peer) or self._twiml(request)
        path = unquote(raw)
        if path == "/":
            return self._static("index.html")
        if path.startswith("/static/"):
            return self._static(path.removeprefix("/static/"))
        if path == "/healthz":
            body = json.dumps(self._health()).encode()
            return response(HTTPStatus.OK, body, "application/json")
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

    def _twiml(self, request: Request) -> Response:
        """The TwiML that connects a call to this server's Media Stream (docs/security.md);
        an ``overlay`` query parameter becomes the stream's parameter of that name."""
        base = self._access.public_url(request, scheme="wss")
        if base is None:
            return text_response(HTTPStatus.BAD_REQUEST, "no Host to point the stream at")
        overlay = parse_qs(urlsplit(request.path).query).get("overlay", [])[:1]
        parameters = "".join(
            f'<Parameter name="overlay" value={quoteattr(name)}/>'
            for name in overlay
            if name.isprintable()  # nothing XML cannot carry
        )
        url = quoteattr(base + self._twilio_path)
        document = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Response><Connect><Stream url={url}>{parameters}</Stream></Connect></Response>\n"
        )
        return response(HTTPStatus.OK, document.encode(), "text/xml; charset=utf-8")

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
