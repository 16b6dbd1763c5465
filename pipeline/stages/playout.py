"""``PlayoutStage``: the last stage; releases reply audio to the transport at the pace of
speech, and only once its turn is committed.

Audio generated preemptively (before the endpoint) waits here until ``TurnCommittedFrame``
says the caller's turn is really over; an interrupt drops it unheard. While the turn engine
holds the ``PlayoutGate`` closed (the caller made a sound over the reply), no frame goes out.
Frames go to the output no more than ``lead_ms`` ahead of real time, so a barge-in can still
stop the audio the caller is about to hear: what was handed over is, within that lead, what was
played — and that is what the playback ledger records — unless the output is a
``PlaybackConfirmingOutput``, whose far end reports what was really played (Twilio echoes a
mark once the audio before it was played): then the output writes ``played`` and ``finish``
into the ledger itself.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from cadence.core.clock import Clock
from cadence.pipeline.frames import (
    AudioOutFrame,
    EndOfReplyFrame,
    Frame,
    ReplyPhraseFrame,
    TurnCommittedFrame,
)
from cadence.pipeline.playback_ledger import PlaybackLedger
from cadence.pipeline.playout_gate import PlayoutGate
from cadence.pipeline.stage import Stage

DEFAULT_LEAD_MS = 60.0
"""How far ahead of real time audio is handed to the transport: enough to ride out a late
wake-up of the event loop, short enough that a barge-in stops the sound at once."""


class AudioOutput(Protocol):
    """Where reply audio goes: a WebRTC track, a telephony socket, a recording."""

    async def send(self, frame: AudioOutFrame) -> None: ...

    async def clear(self) -> None:
        """Drop whatever the transport still buffers (Twilio `clear`)."""
        ...


@runtime_checkable
class PlaybackConfirmingOutput(AudioOutput, Protocol):
    """A output that learns from its far end which audio was played, and records that in the
    ledger itself (``attach``). It is told where each reply ends, to know when the last of it
    was heard."""

    def attach(self, ledger: PlaybackLedger) -> None: ...

    async def end_of_reply(self, reply_index: int) -> None: ...


class PlayoutStage(Stage):
    def __init__(
        self,
        output: AudioOutput,
        *,
        clock: Clock,
        ledger: PlaybackLedger,
        gate: PlayoutGate | None = None,
        lead_ms: float = DEFAULT_LEAD_MS,
        name: str = "playout",
    ) -> None:
        super().__init__(name=name)
        self._output = output
        self._confirming = output if isinstance(output, PlaybackConfirmingOutput) else None
        if self._confirming is not None:
            self._confirming.attach(ledger)
        self._clock = clock
        self._ledger = ledger
        self._gate = gate or PlayoutGate()
        self._lead_ms = lead_ms
        self._committed: set[int] = set()
        self._held: dict[int, list[Frame]] = {}
        self._play_until_ms = 0.0

    async def process(self, frame: Frame) -> None:
        match frame:
            case TurnCommittedFrame():
                self._committed.add(frame.reply_index)
                await self.push(frame)
                for held in self._held.pop(frame.reply_index, []):
                    await self._release(held)
            case AudioOutFrame() | ReplyPhraseFrame() | EndOfReplyFrame():
                if frame.reply_index in self._committed:
                    await self._release(frame)
                else:
                    self._held.setdefault(frame.reply_index, []).append(frame)
            case _:
                await self.push(frame)

    async def on_interrupt(self) -> None:
        self._held.clear()
        self._play_until_ms = 0.0
        await self._output.clear()

    async def _release(self, frame: Frame) -> None:
        match frame:
            case AudioOutFrame():
                while True:  # paced; and held while the gate is closed, even mid-wait
                    await self._gate.opened()
                    self._play_until_ms = max(self._play_until_ms, self._clock.now_ms())
                    await self._clock.sleep_until(self._play_until_ms - self._lead_ms)
                    if self._gate.is_open:
                        break
                await self._output.send(frame)
                self._play_until_ms += frame.duration_ms
                if self._confirming is None:
                    self._ledger.played(frame.reply_index, frame.duration_ms)
            case EndOfReplyFrame() if self._confirming is not None:
                await self._confirming.end_of_reply(frame.reply_index)
            case EndOfReplyFrame():
                self._ledger.finish(frame.reply_index)
        await self.push(frame)
