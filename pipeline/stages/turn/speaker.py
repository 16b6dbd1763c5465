"""``Speaker``: the verbs that put a reply's words into the pipeline, and end it.

Why a room of its own: a word of a reply goes two ways — into the reply (what the history will
keep, round by round) and to TTS (what the caller will hear) — and when the second happens
depends on ``turn.early_emission``, on the reply pausing for its tools, and on its end. Each
verb here says which of these it does:

* ``speak``: add words to the reply; hand them to TTS now with early emission, or where the
  reply pauses (``flush``), else with the rest at the end;
* ``hand_over``: hand TTS what of the reply it has not had (one ``TextPieceFrame``);
* ``speak_before_tools``: the reply waits on its tools: the words said so far go out now;
* ``say_fixed``: a reply of fixed words (the hold reply, the request to repeat), said and ended;
* ``finish``: end the reply with its last words (none, a fallback, or a fixed reply's): the
  rest goes to TTS, the history gets the reply if it was committed (else the commit adds it:
  ``History.add_reply_once_ready``), a goodbye is set to hang up once heard, and
  ``EndOfReplyFrame`` goes out.
"""

from __future__ import annotations

from cadence.core.clock import Clock
from cadence.pipeline.frames import EndOfReplyFrame, TextPieceFrame
from cadence.pipeline.stage import Stage
from cadence.pipeline.stages.turn.hang_up import CallEnder
from cadence.pipeline.stages.turn.history import History
from cadence.pipeline.stages.turn.reply import Reply


class Speaker:
    def __init__(
        self,
        stage: Stage,
        *,
        clock: Clock,
        history: History,
        ender: CallEnder,
        early_emission: bool,
    ) -> None:
        self._stage = stage
        self._clock = clock
        self._history = history
        self._ender = ender
        self._early_emission = early_emission

    async def speak(self, reply: Reply, text: str, at_ms: float, *, flush: bool = False) -> None:
        """Add ``text`` to the reply: it goes to TTS at once with early emission, or where the
        reply pauses (``flush``), else with the rest at the end."""
        reply.add_words(text)
        if self._early_emission or flush:
            await self.hand_over(reply, at_ms, flush=flush)

    async def hand_over(
        self, reply: Reply, at_ms: float, *, flush: bool = False, error: str | None = None
    ) -> None:
        """Hand TTS what of the reply it has not had yet."""
        piece = TextPieceFrame(
            text=reply.take_unsent(), at_ms=at_ms, reply_index=reply.index, flush=flush, error=error
        )
        await self._stage.push(piece)

    async def speak_before_tools(self, reply: Reply) -> None:
        """The reply waits on its tools: the words said before the calls are spoken now,
        whether or not they end a phrase (and whether or not early emission is on)."""
        if reply.has_words:
            await self.hand_over(reply, self._clock.now_ms(), flush=True)

    async def say_fixed(self, reply: Reply, text: str) -> None:
        """A reply of fixed words."""
        await self.finish(reply, text)

    async def finish(self, reply: Reply, last_words: str) -> None:
        """End ``reply`` with ``last_words`` (none, a fallback, or all of a fixed reply); a
        failure's reason goes to the trace with the last piece."""
        if last_words:
            reply.add_words(last_words)
        # What TTS has not had: the last words with early emission, else the whole reply.
        if reply.text[reply.sent :] or (reply.error is not None and self._early_emission):
            await self.hand_over(reply, self._clock.now_ms(), error=reply.error)
        reply.generation_ended()
        if reply.filler is not None:
            reply.filler.cancel()
        self._ender.hang_up_when_heard(reply)
        self._history.add_reply_once_ready(reply)  # if committed already
        await self._stage.push(EndOfReplyFrame(reply_index=reply.index))
