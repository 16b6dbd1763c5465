"""``BodyReadingConnection``: the server's connections, able to take a POST with a small body
— Twilio's voice webhook, form-encoded, as Twilio sends it by default — on the port that
``websockets`` serves.

``websockets`` reads a request's head only, and refuses one that announces a body (400,
"unsupported request body"): a websocket handshake has none. This subclass (``websockets``'
documented ``create_connection`` hook) holds the first bytes of a connection until the head is
complete; if it has one ``Content-Length`` of at most ``MAX_BODY_BYTES``, it waits for the
body, keeps it as ``body`` and hands ``websockets`` the head without its ``Content-Length`` —
a request it parses like any other, for ``process_request`` to answer (``web/routes.py``:
``POST`` where a route takes it, 405 elsewhere), with the body at hand. A larger body is
answered 413 here, unread. Any other request — every websocket handshake — is handed on as
it came, and from then on every byte goes straight to ``websockets``: the audio of a call
never passes through this class. docs/web.md ("One port, and POST") has the
alternatives and what each costs the audio path, measured.
"""

from __future__ import annotations

import re
from typing import Any

from websockets.asyncio.server import ServerConnection

MAX_BODY_BYTES = 64 * 1024
"""The largest body taken; Twilio's voice webhook sends about 1.5 KB. A larger one is refused
(413) without being read."""

MAX_HEAD_BYTES = 64 * 1024
"""Bytes held while waiting for the end of a head; past this, the bytes go on to
``websockets``, whose own limits (8 KiB a line, 128 headers) refuse or accept it."""

_CONTENT_LENGTH = re.compile(rb"(?im)^content-length:[ \t]*(\S*)[ \t]*\r\n")
_EXPECT_CONTINUE = re.compile(rb"(?im)^expect:[ \t]*100-continue[ \t]*\r$")
_END_OF_HEAD = b"\r\n\r\n"


TOO_LARGE = (
    b"HTTP/1.1 413 Content Too Large\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: 19\r\nConnection: close\r\n\r\nthe body is too big\n"
)


def body_length(head: bytes) -> int | None:
    """The length of the body of the request whose head (up to its blank line) is ``head``,
    if this class is to read it: exactly one ``Content-Length``, a number above 0, and no
    ``Transfer-Encoding``. ``None`` otherwise, and the request goes to ``websockets`` as it
    is (which refuses any body)."""
    if re.search(rb"(?im)^transfer-encoding:", head):
        return None
    lengths = _CONTENT_LENGTH.findall(head)
    if len(lengths) != 1 or not lengths[0].isdigit():
        return None
    length = int(lengths[0])
    return length if length > 0 else None


class BodyReadingConnection(ServerConnection):
    """A ``websockets`` server connection that first lifts a small POST body off the wire."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.body = b""
        """The request's body, if it was a POST this class read; else empty."""
        self._held: bytearray | None = bytearray()
        """What came before the head was complete; ``None`` once handed on."""
        self._continued = False
        self._refused = False

    def data_received(self, data: bytes) -> None:
        if self._held is None:
            super().data_received(data)
            return
        if self._refused:
            return
        self._held += data
        end = self._held.find(_END_OF_HEAD)
        if end < 0:
            if len(self._held) > MAX_HEAD_BYTES:
                self._hand_on(bytes(self._held))
            return
        head = bytes(self._held[: end + 2])  # each header line with its CRLF
        length = body_length(head)
        if length is None:
            self._hand_on(bytes(self._held))
            return
        if length > MAX_BODY_BYTES:
            self._refuse_too_large()
            return
        start = end + len(_END_OF_HEAD)
        if len(self._held) < start + length:
            if not self._continued and _EXPECT_CONTINUE.search(head):
                self._continued = True  # curl and others wait for this before the body
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            return
        self.body = bytes(self._held[start : start + length])
        rest = bytes(self._held[start + length :])
        self._hand_on(_CONTENT_LENGTH.sub(b"", head) + b"\r\n" + rest)

    def eof_received(self) -> None:
        if self._refused:
            self.transport.close()
            return
        if self._held is not None:
            self._hand_on(bytes(self._held))  # a partial request: websockets says why not
        super().eof_received()

    def _refuse_too_large(self) -> None:
        """Answer 413 and stop sending; what the client still sends is dropped here, until it
        closes or ``websockets``' opening timeout aborts the connection."""
        self._held = bytearray()
        self._refused = True
        self.transport.write(TOO_LARGE)
        if self.transport.can_write_eof():
            self.transport.write_eof()

    def _hand_on(self, data: bytes) -> None:
        self._held = None
        if data:
            super().data_received(data)
