"""``TwilioPhone``: the Twilio emulator with what only the tests make it do — key presses,
messages Twilio would never send, and a connection that vanishes — so that the emulator the
bench ships carries no code that only a test calls."""

from __future__ import annotations

from typing import Any

from cadence.tooling.emulators.twilio import TwilioEmulator
from cadence.voice.audio import PCM16
from cadence.web.serializers.twilio import DTMF, DTMFMessage


class TwilioPhone(TwilioEmulator):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.utterances = 0
        """How many times the caller has begun to say something other than silence: the
        event a test waits for to act while the caller's turn is under way."""

    async def say(self, pcm: PCM16, sample_rate: int) -> None:
        if pcm.any():
            self.utterances += 1
        await super().say(pcm, sample_rate)

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
