"""``WebsocketEntry``: what a websocket transport declares so that the server can route to it
without naming it — its path, who may open it, how a connection becomes a call, and the
plain HTTP routes its provider fetches beside it (Twilio's TwiML webhook).

The server (``web/server.py``) iterates over the declared entries and hands their paths,
checks and routes to ``web/routes.py``, so a provider that bridges calls over a websocket is
one serializer (``web/serializers/<provider>.py``) and one transport module exposing its
entry, added to the server's list.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from websockets.asyncio.server import ServerConnection

from cadence.pipeline.config import CadenceConfig
from cadence.web.routes import AccessCheck, HTTPRoute
from cadence.web.transports.admission import Admission


def _no_routes(path: str) -> Mapping[str, HTTPRoute]:
    return {}


@dataclass(frozen=True)
class WebsocketEntry:
    """One websocket transport, as the server routes it."""

    path: Callable[[CadenceConfig], str]
    """Its websocket's path, from the configuration."""
    check: AccessCheck
    """Who may open the websocket."""
    accept: Callable[[ServerConnection, Admission], Awaitable[None]]
    """Serve one connection that passed ``check``: admit its call, or turn it away, and run
    the call to its end."""
    routes: Callable[[str], Mapping[str, HTTPRoute]] = _no_routes
    """The HTTP routes that go with the websocket at the given path, by their paths."""
