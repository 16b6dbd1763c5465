"""The signaling protocol between the page and the server: what a browser may send, checked
before anything acts on it.

The page sends JSON text messages on the signaling websocket:

* ``{"type": "offer", "sdp": "v=0…"}`` — once, after its ICE gathering completed (no trickle
  ICE), carrying exactly one audio stream;
* ``{"type": "hangup"}`` — the visitor ends the call.

Anything else — a binary frame, text that is not a JSON object, an unknown type, a second
offer, an offer that is too large or carries video or data channels — is a
:class:`SignalingError`: the server answers with an ``error`` event and closes the socket.
Every check is on the raw text, before aiortc parses the SDP.

The server's messages are ``hello``, ``answer``, ``error`` and the session's events
(``page_events.py``); its ``hangup`` (with the ``reason``) says the agent ended the call, and
the socket then closes normally.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import IntEnum

MAX_MESSAGE_BYTES = 64 * 1024
"""Larger than any real offer (a browser's audio-only offer is 2–6 KB)."""


class CloseCode(IntEnum):
    """Websocket close codes the server ends a call with (RFC 6455 §7.4.1)."""

    NORMAL = 1000
    GOING_AWAY = 1001
    UNSUPPORTED_DATA = 1003
    POLICY_VIOLATION = 1008
    TOO_LARGE = 1009
    INTERNAL_ERROR = 1011
    TRY_AGAIN_LATER = 1013


class SignalingError(Exception):
    """The visitor broke the protocol (or the call cannot go on): ``code`` and ``message``
    go to the page as an ``error`` event, then the socket closes with ``close_code``."""

    def __init__(
        self, code: str, message: str, close_code: CloseCode = CloseCode.POLICY_VIOLATION
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.close_code = close_code


@dataclass(frozen=True)
class Offer:
    sdp: str


@dataclass(frozen=True)
class Hangup:
    pass


ClientMessage = Offer | Hangup


def parse_client_message(raw: str | bytes) -> ClientMessage:
    """The message ``raw`` carries, or :class:`SignalingError` saying what is wrong with it."""
    if isinstance(raw, bytes):
        raise SignalingError("bad_message", "signaling messages are JSON text, not binary")
    if len(raw.encode()) > MAX_MESSAGE_BYTES:
        raise SignalingError(
            "too_large",
            f"signaling message over {MAX_MESSAGE_BYTES} bytes",
            CloseCode.TOO_LARGE,
        )
    try:
        message = json.loads(raw)
    except ValueError as exc:
        raise SignalingError("bad_json", f"not JSON: {exc}") from exc
    if not isinstance(message, dict):
        raise SignalingError("bad_message", "a signaling message is a JSON object")
    match message.get("type"):
        case "offer":
            sdp = message.get("sdp")
            if not isinstance(sdp, str):
                raise SignalingError("bad_offer", "an offer needs an `sdp` string")
            _check_offer(sdp)
            return Offer(sdp)
        case "hangup":
            return Hangup()
        case other:
            raise SignalingError("unknown_type", f"unknown message type {other!r}")


def _check_offer(sdp: str) -> None:
    if not sdp.startswith("v=0"):
        raise SignalingError("bad_offer", "the offer is not an SDP session description")
    media = [line[2:].split(" ", 1)[0] for line in sdp.splitlines() if line.startswith("m=")]
    if media != ["audio"]:
        raise SignalingError(
            "bad_offer", f"the offer must carry exactly one audio stream, got {media or 'none'}"
        )
