"""``ICEServers``: the STUN and TURN servers of ``server.ice_servers`` with their credentials,
as one call's two peers are given them — aiortc's ``RTCConfiguration`` for the server's peer,
and the same list, as JSON, in the ``hello`` the page builds its ``RTCPeerConnection`` from.

The credentials are read from the environment once, when the server starts (a name that is
not set stops the start, like every other secret: ``AccessConfigError``). With coturn's shared
secret (``secret_env``) each call is given credentials of its own that expire: the page shows
them to whoever opened it, so a long-lived password would let any visitor relay through the
TURN server for as long as it is not changed. Only admitted callers get a ``hello``, so the
credentials go to no one the server's token or origin checks turned away.

With no server configured, both peers get an empty list: aiortc would otherwise use a public
STUN server of its own choosing.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from aiortc import RTCConfiguration, RTCIceServer, RTCIceTransportPolicy

from cadence.pipeline.config import CadenceConfig
from cadence.pipeline.config.ice import ICEServerConfig, ICETransportPolicy
from cadence.web.access import AccessConfigError

TURN_USER = "cadence"
"""The name after the expiry in the usernames minted from a shared secret (coturn logs it)."""

POLICIES = {"all": RTCIceTransportPolicy.ALL, "relay": RTCIceTransportPolicy.RELAY}


@dataclass(frozen=True)
class ICEServer:
    """One server's URLs and the credentials a call uses with it (none for STUN)."""

    urls: tuple[str, ...]
    username: str | None = None
    credential: str | None = field(default=None, repr=False)

    def page(self) -> dict[str, object]:
        """As the browser's ``RTCIceServer`` dictionary."""
        entry: dict[str, object] = {"urls": list(self.urls)}
        if self.username is not None:
            entry |= {"username": self.username, "credential": self.credential}
        return entry


def minted_credentials(secret: str, expires_at: int, user: str = TURN_USER) -> tuple[str, str]:
    """coturn's TURN REST API (``use-auth-secret``): the username is the Unix time at which
    the credentials expire, a colon and a name; the password is the base64 HMAC-SHA1 of the
    username, keyed with the shared secret."""
    username = f"{expires_at}:{user}"
    digest = hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()
    return username, base64.b64encode(digest).decode("ascii")


@dataclass(frozen=True)
class _Configured:
    urls: tuple[str, ...]
    username: str | None = None
    credential: str | None = field(default=None, repr=False)
    secret: str | None = field(default=None, repr=False)
    ttl_s: int = 0


class ICEServers:
    """The ICE servers of one server process, credentials included; ``for_call`` gives each
    call its list."""

    def __init__(
        self,
        servers: Sequence[_Configured] = (),
        policy: ICETransportPolicy = "all",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._servers = tuple(servers)
        self.policy: ICETransportPolicy = policy
        self._clock = clock

    @classmethod
    def from_environment(
        cls,
        config: CadenceConfig,
        environ: Mapping[str, str] = os.environ,
        clock: Callable[[], float] = time.time,
    ) -> ICEServers:
        """Raises ``AccessConfigError`` if a variable a server names is not set."""
        servers = [
            _resolve(index, server, environ)
            for index, server in enumerate(config.server.ice_servers)
        ]
        return cls(servers, config.server.ice_transport_policy, clock)

    def for_call(self) -> list[ICEServer]:
        """The servers for one call, with credentials minted for it where a secret is set."""
        now = int(self._clock())
        servers = []
        for server in self._servers:
            username, credential = server.username, server.credential
            if server.secret is not None:
                username, credential = minted_credentials(server.secret, now + server.ttl_s)
            servers.append(ICEServer(server.urls, username, credential))
        return servers

    def rtc_configuration(self, servers: Sequence[ICEServer]) -> RTCConfiguration:
        """aiortc's configuration for the server's peer: always a list, never aiortc's
        default STUN server."""
        return RTCConfiguration(
            iceServers=[
                RTCIceServer(list(s.urls), username=s.username, credential=s.credential)
                for s in servers
            ],
            iceTransportPolicy=POLICIES[self.policy],
        )

    def page(self, servers: Sequence[ICEServer]) -> dict[str, object]:
        """The ``hello`` fields from which the page builds its ``RTCPeerConnection``."""
        return {
            "ice_servers": [server.page() for server in servers],
            "ice_transport_policy": self.policy,
        }


def _resolve(index: int, server: ICEServerConfig, environ: Mapping[str, str]) -> _Configured:
    def read(key: str, name: str | None) -> str | None:
        if name is None:
            return None
        value = environ.get(name, "")
        if not value:
            raise AccessConfigError(f"server.ice_servers[{index}].{key} names ${name}, not set")
        return value

    return _Configured(
        urls=tuple(server.urls),
        username=read("username_env", server.username_env),
        credential=read("credential_env", server.credential_env),
        secret=read("secret_env", server.secret_env),
        ttl_s=server.credential_ttl_s,
    )
