"""``TwilioPhone``: the Twilio emulator with what only the tests make it do — key presses,
messages Twilio would never send, and a connection that vanishes — so that the emulator the
bench ships carries no code that only a test calls."""

from __future__ import annotations

from cadence.tooling.emulators.twilio import TwilioEmulator
from cadence.web.serializers.twilio import DTMF, DTMFMessage


class TwilioPhone(TwilioEmulator):
    async def press(self, digit: str) -> None:
        await self._send(
            DTMFMessage(stream_sid=self.stream_sid, dtmf=DTMF(digit=digit, track="inbound_track"))
        )

    @property
    def local_port(self) -> int:
        """The port of this end of the connection: how the server's side knows it."""
        assert self._ws is not None
        port: int = self._ws.local_address[1]
        return port

    async def send_raw(self, text: str | bytes) -> None:
        """Anything at all, as a misbehaving peer would send it."""
        assert self._ws is not None
        await self._ws.send(text)

    async def vanish(self) -> None:
        """Drop the connection without a ``stop`` or a close frame: a network gone, a crashed
        media server."""
        if self._ws is not None:
            self._ws.transport.abort()
        await self._stop()

    async def closed(self) -> None:
        """Wait until the server closes the stream."""
        assert self._ws is not None
        await self._ws.wait_closed()
        self._record_close()
