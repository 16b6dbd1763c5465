"""The server's sections of the configuration: where it listens and who may call
(``server``), what the demo page shows (``server.page``), and the telephony endpoints
(``telephony``) — with the address rules they share (a public origin, an AudioSocket address).

Apart from ``schema.py``, which holds what a call does (models, turn-taking, budget, tools),
because these say only where calls come from; ``CadenceConfig`` embeds both."""

from __future__ import annotations

from ipaddress import ip_network
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, model_validator

from cadence.core.options import Options
from cadence.pipeline.config.ice import ICEServerConfig, ICETransportPolicy, is_turn


def _origin(url: str) -> str:
    public_origin(url)
    return url


def _network(text: str) -> str:
    ip_network(text, strict=False)
    return text


OriginURL = Annotated[str, AfterValidator(_origin)]
"""`https://host[:port]`: a browser page's origin, or where a proxy serves the server."""
Network = Annotated[str, AfterValidator(_network)]
"""An IP address or network (`10.0.0.0/24`)."""


def _default_page_examples() -> list[str]:
    return [
        "I need a hotel for two nights.",
        "Book a table for two at an Italian restaurant tonight.",
        "Find me a flight to New York next Friday.",
    ]


class PageConfig(Options):
    """What the demo page tells a visitor the agent can talk about (served as `/page.json`,
    shown before the call): it depends on the turn generator, so it lives beside the models'
    configuration rather than in the page. The defaults describe the embedded model."""

    scope: str = (
        "It helps book restaurants, hotels, trains, flights and events, and talks about the "
        "weather: a small model trained on such dialogues, so the places and times it names are "
        "made up."
    )
    """One sentence on what the agent can help with, shown on the page before the call."""
    examples: list[str] = Field(default_factory=_default_page_examples)
    """A few things a visitor can say to it (two or three)."""


class ServerConfig(Options):
    host: str = "127.0.0.1"
    """Interface to bind; loopback by default, so nothing is exposed unless asked."""
    port: int = Field(8080, ge=0, le=65535)
    """HTTP port of the demo page, signaling, telephony websockets, health and metrics; 0 = a
    free port the system picks (printed at start)."""
    max_sessions: int = Field(8, ge=1)
    """Sessions beyond this are refused rather than degrading every call; with `workers`, a
    limit of each worker (the server takes `workers × max_sessions` in all)."""
    workers: int = Field(1, ge=1)
    """Worker processes serving the one port (`cadence serve --workers`), each with its own
    models and its share of the calls, the kernel spreading connections among them
    (SO_REUSEPORT); one that dies is restarted. One per two cores (docs/deploy.md)."""
    drain_timeout_s: float = Field(300.0, ge=0, allow_inf_nan=False)
    """On SIGTERM the server stops taking calls (`/readyz` answers 503, newcomers are refused
    as `draining`) and waits this long at most for the calls in progress to end before it
    closes them and exits; an orchestrator's grace period must be longer (docs/deploy.md).
    SIGINT (Ctrl-C) closes at once."""
    auth_token_env: str | None = None
    """Name of the environment variable holding a shared secret (at least 16 characters) that
    the signaling websocket and the Twilio one require — as `Authorization: Bearer …` or a
    `token` query parameter (the page forwards its own `?token=…`); null = no token. The
    secret itself never goes in a configuration (docs/security.md)."""
    allowed_origins: list[OriginURL] | None = None
    """Browser origins (`https://voice.example.com`) whose pages may open the websockets; null
    = only the server's own, the host the request names. Clients that send no `Origin` (not
    browsers) are not subject to it."""
    max_messages_per_s: float = Field(10.0, gt=0, allow_inf_nan=False)
    """Messages a signaling websocket may send per second, with bursts of twice that; past it
    the page gets a `rate_limited` error and the socket closes with 1008. A page sends two."""
    page: PageConfig = PageConfig()
    """How the demo page describes the agent: its scope follows the turn generator
    (`models.llm`), so a configuration that changes one should change the other."""
    ice_servers: list[ICEServerConfig] = Field(default_factory=list)
    """STUN and TURN servers for the browser's WebRTC call, handed to the server's peer and
    to the page (`pipeline/config/ice.py`; docs/web.md has a coturn example); empty = none
    is contacted, and only the machine's own addresses are offered, which a visitor behind
    NAT cannot reach."""
    ice_transport_policy: ICETransportPolicy = "all"
    """`relay`: both peers use TURN relays only, so the audio always goes through the TURN
    server and neither side's own address is offered (needs a TURN server above); `all`:
    every path ICE finds."""

    @model_validator(mode="after")
    def _relay_needs_turn(self) -> ServerConfig:
        if self.ice_transport_policy == "relay" and not any(
            is_turn(url) for server in self.ice_servers for url in server.urls
        ):
            raise ValueError("ice_transport_policy relay needs a TURN server in ice_servers")
        return self


class TelephonyConfig(Options):
    twilio_path: str = "/twilio"
    """Websocket path of the Twilio Media Streams endpoint."""
    twilio_auth_token_env: str | None = None
    """Name of the environment variable holding the Twilio account's auth token; when set, the
    Media Stream handshake and the TwiML webhook (`<twilio_path>/twiml`) must carry Twilio's
    signature of their URL (or, on the stream, the `server.auth_token_env` token); null = not
    checked."""
    public_url: OriginURL | None = None
    """`https://host[:port]` at which Twilio reaches this server (through the TLS proxy): the
    signatures are checked against it and the TwiML points Twilio's stream at it; null = the
    host the request names, over TLS."""
    twilio_max_messages_per_s: float = Field(250.0, gt=0, allow_inf_nan=False)
    """Messages a Twilio stream may send per second, with bursts of twice that (a call sends
    50 media and up to 50 marks); past it the stream is closed with 1008."""
    audiosocket: str | None = None
    """`HOST:PORT` on which to accept Asterisk AudioSocket connections (`cadence serve
    --audiosocket`); null = off, as it has no authentication of its own: bind it where only
    the Asterisk server can reach it."""
    audiosocket_allow: list[Network] | None = None
    """Addresses or networks (`10.0.0.5`, `10.0.0.0/24`) that may connect to the AudioSocket
    port; others get a hang-up. null = any that can reach it."""
    audiosocket_max_frames_per_s: float = Field(250.0, gt=0, allow_inf_nan=False)
    """Frames an AudioSocket call may send per second, with bursts of twice that (Asterisk
    sends 50); past it the call is hung up."""

    @model_validator(mode="after")
    def _check_audiosocket(self) -> TelephonyConfig:
        if self.audiosocket is not None:
            audiosocket_address(self.audiosocket)
        return self


def public_origin(url: str) -> str:
    """``url`` as an origin (``https://host[:port]``, no path, no default port); ``ValueError``
    if it is not one."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError as exc:  # not a number, or out of range
        raise ValueError(f"{url!r}: {exc}") from None
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.path.strip("/")
        or parts.query
        or parts.fragment
        or parts.username
        or port == 0
    ):
        raise ValueError(f"expected a scheme and a host, like https://HOST[:PORT], got {url!r}")
    netloc = parts.netloc.lower()
    if port == DEFAULT_PORTS[parts.scheme]:  # as browsers write an origin
        netloc = netloc.rpartition(":")[0]
    return f"{parts.scheme}://{netloc}"


DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def audiosocket_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9092`` for IPv6) as a host and a port; ``ValueError`` if not."""
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT (e.g. 127.0.0.1:9092), got {text!r}")
    return host, int(port)
