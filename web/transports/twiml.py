"""The TwiML webhook of Twilio Media Streams: what a Twilio number fetches when a call comes
in, telling Twilio to connect the call to this server's stream (``twilio.py``).

Apart from the stream because it is plain HTTP, served beside the websocket on
``<twilio_path>/twiml`` by ``GET`` or ``POST`` (Twilio's default), and has a rule of its own:
when Twilio's auth token is configured, only Twilio's signed requests fetch it
(``AccessPolicy.twiml``, docs/security.md)."""

from __future__ import annotations

import functools
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit
from xml.sax.saxutils import quoteattr

from websockets.http11 import Request, Response

from cadence.web.access import AccessPolicy
from cadence.web.routes import Form, HTTPRoute, response, text_response

TWIML_METHODS = frozenset({"GET", "HEAD", "POST"})
"""Twilio fetches a number's webhook with ``POST`` unless told ``GET`` in its console."""


def twiml(access: AccessPolicy, request: Request, form: Form, *, stream_path: str) -> Response:
    """The TwiML that connects a call to this server's Media Stream (docs/security.md), to
    Twilio's ``GET`` or ``POST`` (whose ``form`` — the call's details — it does not need); an
    ``overlay`` query parameter becomes the stream's parameter of that name. Nothing
    follows the ``<Connect>``: once the stream is closed the call ends, which is how the agent
    hangs up (``TwilioCall.hang_up``)."""
    base = access.public_url(request, scheme="wss")
    if base is None:
        return text_response(HTTPStatus.BAD_REQUEST, "no Host to point the stream at")
    overlay = parse_qs(urlsplit(request.path).query).get("overlay", [])[:1]
    parameters = "".join(
        f'<Parameter name="overlay" value={quoteattr(name)}/>'
        for name in overlay
        if name.isprintable()  # nothing XML cannot carry
    )
    url = quoteattr(base + stream_path)
    document = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Connect><Stream url={url}>{parameters}</Stream></Connect></Response>\n"
    )
    return response(HTTPStatus.OK, document.encode(), "text/xml; charset=utf-8")


def twiml_routes(stream_path: str) -> dict[str, HTTPRoute]:
    """The TwiML webhook, beside the stream, by ``GET`` or ``POST`` (Twilio's default): only
    Twilio's signed requests fetch it when its auth token is configured (Twilio cannot send
    our token)."""
    respond = functools.partial(twiml, stream_path=stream_path)
    route = HTTPRoute(check=AccessPolicy.twiml, respond=respond, methods=TWIML_METHODS)
    return {f"{stream_path.rstrip('/')}/twiml": route}
