"""``server.ice_servers``: the STUN and TURN servers both WebRTC peers of a browser call use to
find a path to each other through NAT — aiortc's peer in the server and the page's own
(web/ice.py hands them over; docs/web.md, "Reachable through NAT").

Only the URLs and the *names* of environment variables are configuration: a TURN password in
a YAML file would be in every copy of the file and every ConfigMap, so the values are read
from the environment when the server starts. The default is no server at all, so that nothing
is contacted unless a deployment asks for it (aiortc's own default would be a public STUN
server).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from cadence.core.options import Options

ICE_URL = re.compile(
    r"(?P<scheme>stuns?|turns?):(?P<host>[^?:\s\[\]/@]+)(?::(?P<port>\d{1,5}))?"
    r"(?:\?transport=(?P<transport>udp|tcp))?"
)
"""The URLs of RFC 7064 (STUN) and RFC 7065 (TURN) that aiortc and browsers both accept: a
host name or IPv4 address (aiortc parses no IPv6 literal), an optional port, and for TURN an
optional transport."""


def _ice_url(url: str) -> str:
    match = ICE_URL.fullmatch(url)
    if match is None:
        raise ValueError(
            "expected stun:HOST[:PORT], turn:HOST[:PORT][?transport=udp|tcp] or "
            f"turns:HOST[:PORT][?transport=tcp], got {url!r}"
        )
    scheme, port, transport = match["scheme"], match["port"], match["transport"]
    if scheme.startswith("stun") and transport is not None:
        raise ValueError(f"a STUN URL takes no transport (RFC 7064): {url!r}")
    if scheme == "turns" and transport == "udp":
        raise ValueError(f"turns: is TURN over TLS, so over TCP: {url!r}")
    if port is not None and not 1 <= int(port) <= 65535:
        raise ValueError(f"port out of range: {url!r}")
    return url


ICEURL = Annotated[str, AfterValidator(_ice_url)]


def is_turn(url: str) -> bool:
    return url.startswith("turn")


class ICEServerConfig(Options):
    """One STUN or TURN server. A TURN server needs credentials, from the environment: either
    a long-term username and password (coturn's `user=`), or coturn's shared secret
    (`use-auth-secret`, `static-auth-secret=`), from which each call is given a username and
    password of its own that expire (the TURN REST API) — the better choice, since the page
    is handed the credentials and any visitor can read them."""

    urls: list[ICEURL] = Field(min_length=1)
    """`stun:HOST[:PORT]`, `turn:HOST[:PORT][?transport=udp|tcp]` or
    `turns:HOST[:PORT][?transport=tcp]` (port 3478, 5349 for `turns:`). The browser tries
    every URL; aiortc, in the server, uses the first STUN and the first TURN URL it can."""
    username_env: str | None = None
    """Name of the environment variable holding the TURN username (long-term credentials,
    with `credential_env`)."""
    credential_env: str | None = None
    """Name of the environment variable holding the TURN password."""
    secret_env: str | None = None
    """Name of the environment variable holding coturn's `static-auth-secret`: each call
    gets a username `EXPIRY:cadence` and its HMAC-SHA1 as password, valid for
    `credential_ttl_s`; instead of `username_env` and `credential_env`."""
    credential_ttl_s: int = Field(3600, ge=60)
    """How long the credentials minted from `secret_env` stay valid (a call must start
    within it; coturn lets an allocation made in time go on)."""

    @model_validator(mode="after")
    def _credentials(self) -> ICEServerConfig:
        long_term = (self.username_env is not None, self.credential_env is not None)
        if long_term[0] != long_term[1]:
            raise ValueError("username_env and credential_env go together")
        if long_term[0] and self.secret_env is not None:
            raise ValueError("secret_env replaces username_env and credential_env: set one")
        has_credentials = long_term[0] or self.secret_env is not None
        turn = any(is_turn(url) for url in self.urls)
        if turn and not has_credentials:
            raise ValueError(
                "a TURN server needs credentials: username_env and credential_env, or "
                "secret_env (the values come from the environment, never this file)"
            )
        if has_credentials and not turn:
            raise ValueError("credentials are for TURN; a STUN server takes none")
        return self


ICETransportPolicy = Literal["all", "relay"]
