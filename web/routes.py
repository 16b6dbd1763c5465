"""The plain HTTP side of the server: the page, its static files, ``/healthz`` and
``/metrics``.

``websockets`` reads every request's head; ``respond`` answers those that are not the
signaling websocket with a whole response, so one port serves both and no second HTTP
framework is needed. Only ``GET`` is served (``websockets`` refuses other methods).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path
from urllib.parse import unquote, urlsplit

from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from web.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from web.metrics import ServerMetrics

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
    return Response(status.value, status.phrase, headers, body)


def text_response(status: HTTPStatus, text: str) -> Response:
    return response(status, f"{text}\n".encode(), "text/plain; charset=utf-8")


class Routes:
    """Answers the HTTP requests; ``None`` lets the signaling path become a websocket."""

    def __init__(
        self,
        *,
        websocket_paths: frozenset[str],
        metrics: ServerMetrics,
        health: Callable[[], dict[str, object]],
    ) -> None:
        self._websocket_paths = websocket_paths
        self._metrics = metrics
        self._health = health

    def respond(self, request: Request) -> Response | None:
        path = unquote(urlsplit(request.path).path)
        if path in self._websocket_paths:
            return None
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
