"""``CallEnder``: hanging up — once, and only after the goodbye was heard.

Why a room of its own: the call may be ended by the model (a reply that called ``end_call``:
its words are the goodbye) or by the application (``EndCallFrame``, ``session.end_call()``),
at any point of a reply's life, and each pairing has its rule: a goodbye hangs up once it has
been heard to its end (and up to the playout's lead after); the application's end waits for the
reply being heard, or comes at once; a caller who speaks over the goodbye keeps the call, and
the history says ``end_call`` did not end it; a reply thrown away keeps the application's end
but not its own goodbye. Both may ask: ``HangUpFrame`` goes out once.
"""

from __future__ import annotations

from cadence.core.clock import Clock
from cadence.pipeline.frames import HangUpFrame
from cadence.pipeline.playback_ledger import PlaybackLedger
from cadence.pipeline.stage import Stage
from cadence.pipeline.stages.playout import DEFAULT_LEAD_MS
from cadence.pipeline.stages.turn.reply import Reply, ReplyState


class CallEnder:
    def __init__(self, stage: Stage, *, clock: Clock, ledger: PlaybackLedger) -> None:
        self._stage = stage
        self._clock = clock
        self._ledger = ledger
        self._hung_up = False

    async def end_call(self, reply: Reply | None, reason: str) -> None:
        """The application ends the call: once the reply being heard has been heard, or now."""
        if reply is not None and reply.committed and not self._ledger.finished(reply.index):
            reply.ends_call = reason
            if reply.state is ReplyState.SPOKEN:
                self.hang_up_when_heard(reply)
            return
        await self.hang_up(reason)

    def hang_up_when_heard(self, reply: Reply) -> None:
        """Hang up once ``reply`` (which ends the call) has been heard to its end."""
        if reply.ends_call is not None and reply.hang_up is None:
            reply.hang_up = self._stage.spawn(self._when_heard(reply), name="hang-up")

    def cancel_goodbye(self, reply: Reply) -> None:
        """The caller spoke over the model's goodbye: the call goes on, and the history will
        say that ``end_call`` did not end it."""
        if reply.goodbye:
            reply.ends_call, reply.goodbye = None, False
            reply.set_results("end_call", {"status": "not ended: the caller spoke"})

    async def hang_up_after_cut(self, reply: Reply) -> None:
        """``reply`` was cut or thrown away: the application's end of the call stands (the
        model's goodbye, not heard, does not)."""
        if reply.ends_call is not None and not reply.goodbye:
            await self.hang_up(reply.ends_call)

    async def hang_up(self, reason: str) -> None:
        """Now, once: the application and the model may both end the call."""
        if self._hung_up:
            return
        self._hung_up = True
        try:
            await self._stage.push(HangUpFrame(reason=reason, at_ms=self._clock.now_ms()))
        except BaseException:
            self._hung_up = False  # cancelled before it went: whoever asks next hangs up
            raise

    async def _when_heard(self, reply: Reply) -> None:
        await reply.committed_event.wait()
        await self._ledger.wait_finished(reply.index)
        # Finished is "handed over" where the far end confirms nothing: up to the playout's
        # lead more is still to be heard.
        await self._clock.sleep_until(self._clock.now_ms() + DEFAULT_LEAD_MS)
        await self.hang_up(reply.ends_call or "the agent ended the call")
