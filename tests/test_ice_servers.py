"""``server.ice_servers``: what the configuration accepts, the credentials read from the
environment (never the file) or minted per call from coturn's shared secret, and what each
peer is handed — aiortc's ``RTCConfiguration`` and the page's ``hello`` fields. The default
hands both an empty list: no server is contacted (aiortc, given none, would pick its own).

A real call through a TURN relay is ``tests/test_web_turn_relay.py``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

import pytest
from aiortc import RTCIceTransportPolicy
from pydantic import ValidationError

from cadence.pipeline.config import CadenceConfig
from cadence.web.access import AccessConfigError
from cadence.web.ice import ICEServers
from cadence.web.server import CadenceServer

TURN = "turn:turn.example.com:3478?transport=udp"


def config(servers: list[dict[str, Any]], policy: str = "all") -> CadenceConfig:
    return CadenceConfig.model_validate(
        {"server": {"ice_servers": servers, "ice_transport_policy": policy}}
    )


def test_by_default_no_server_is_handed_to_either_peer() -> None:
    ice = ICEServers.from_environment(CadenceConfig(), environ={})
    servers = ice.for_call()
    assert servers == []
    rtc = ice.rtc_configuration(servers)
    assert rtc.iceServers == []  # a list: None would make aiortc use its default STUN server
    assert rtc.iceTransportPolicy is RTCIceTransportPolicy.ALL
    assert ice.page(servers) == {"ice_servers": [], "ice_transport_policy": "all"}


@pytest.mark.parametrize(
    ("servers", "policy", "complaint"),
    [
        ([{"urls": [TURN]}], "all", "needs credentials"),
        ([{"urls": ["stun:stun.example.com"], "secret_env": "S"}], "all", "STUN server takes"),
        ([{"urls": [TURN], "username_env": "U"}], "all", "go together"),
        (
            [{"urls": [TURN], "username_env": "U", "credential_env": "P", "secret_env": "S"}],
            "all",
            "set one",
        ),
        ([{"urls": ["turns:t.example.com?transport=udp"], "secret_env": "S"}], "all", "TLS"),
        ([{"urls": ["stun:s.example.com?transport=udp"]}], "all", "no transport"),
        ([{"urls": ["http://t.example.com"]}], "all", "expected stun:"),
        ([{"urls": ["turn:[::1]:3478"], "secret_env": "S"}], "all", "expected stun:"),
        ([{"urls": []}], "all", "at least 1"),
        ([{"urls": ["stun:stun.example.com"]}], "relay", "needs a TURN server"),
        ([], "relay", "needs a TURN server"),
    ],
)
def test_bad_ice_settings_are_refused_at_load(
    servers: list[dict[str, Any]], policy: str, complaint: str
) -> None:
    with pytest.raises(ValidationError, match=complaint):
        config(servers, policy)


def test_long_term_credentials_come_from_the_environment() -> None:
    settings = config(
        [
            {"urls": ["stun:stun.example.com:3478"]},
            {"urls": [TURN], "username_env": "TURN_USER", "credential_env": "TURN_PASSWORD"},
        ],
        policy="relay",
    )
    environ = {"TURN_USER": "alice", "TURN_PASSWORD": "pa55word-of-alice"}
    ice = ICEServers.from_environment(settings, environ=environ)
    servers = ice.for_call()
    assert [s.page() for s in servers] == [
        {"urls": ["stun:stun.example.com:3478"]},
        {"urls": [TURN], "username": "alice", "credential": "pa55word-of-alice"},
    ]
    rtc = ice.rtc_configuration(servers)
    assert rtc.iceTransportPolicy is RTCIceTransportPolicy.RELAY
    assert rtc.iceServers is not None
    assert [(s.urls, s.username, s.credential) for s in rtc.iceServers] == [
        (["stun:stun.example.com:3478"], None, None),
        ([TURN], "alice", "pa55word-of-alice"),
    ]
    assert ice.page(servers)["ice_transport_policy"] == "relay"
    assert "pa55word" not in repr(servers) + repr(ice.__dict__)

    with pytest.raises(AccessConfigError, match=r"ice_servers\[1\]\.credential_env.*TURN_PASSWORD"):
        ICEServers.from_environment(settings, environ={"TURN_USER": "alice"})


def test_a_shared_secret_mints_credentials_for_each_call_as_coturn_checks_them() -> None:
    settings = config([{"urls": [TURN], "secret_env": "TURN_SECRET", "credential_ttl_s": 600}])
    now = [1_760_000_000.0]
    ice = ICEServers.from_environment(
        settings, environ={"TURN_SECRET": "north-wind"}, clock=lambda: now[0]
    )
    [first] = ice.for_call()
    # coturn's TURN REST API: username = expiry (Unix time) ":" name; password =
    # base64(HMAC-SHA1(secret, username)) — as `openssl dgst -sha1 -hmac` computes it.
    assert first.username == "1760000600:cadence"
    expected = hmac.new(b"north-wind", b"1760000600:cadence", hashlib.sha1).digest()
    assert first.credential == base64.b64encode(expected).decode()
    now[0] += 30
    [later] = ice.for_call()
    assert later.username == "1760000630:cadence"
    assert later.credential != first.credential
    assert "north-wind" not in repr(ice.__dict__)


def test_a_missing_turn_secret_stops_the_server_before_it_starts() -> None:
    settings = config([{"urls": [TURN], "secret_env": "CADENCE_TEST_UNSET_TURN_SECRET"}])
    with pytest.raises(AccessConfigError, match="CADENCE_TEST_UNSET_TURN_SECRET"):
        CadenceServer(settings)
