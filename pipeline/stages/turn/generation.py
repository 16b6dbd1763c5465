"""``Generation``: a reply generated round after round, its words streamed as they come, and
the cores given back to what a caller is waiting for.

Why a room of its own: this is the reply's own work, a task beside the stage's worker that the
decisions about the turn may cancel at any await. It asks the generator, streams each piece
into the reply (``Speaker.speak``), hands a round's tool calls to ``ToolRounds`` and asks again
with their results, for up to ``tools.max_rounds`` rounds. It is also where the reply yields
the CPU (docs/cpu-budget.md): until its first phrase is complete, a reply nothing of which was
said is what the caller waits for (urgent work); after it, the rest waits for that phrase's
audio, then before each block for the urgent work of every call. A generator that raises,
reports an error or goes quiet for ``faults.llm_timeout_ms`` ends the reply there, with
``faults.reply_fallback`` if none of it was said (``faults``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Coroutine, Sequence
from contextlib import aclosing
from typing import Any

from cadence.core.clock import Clock
from cadence.core.priority import UrgentWork
from cadence.llm import Turn, TurnGenerator
from cadence.llm.dialogue import ToolCall
from cadence.llm.tools import ToolChoice
from cadence.pipeline.config import FaultsConfig, ToolsConfig
from cadence.pipeline.playback_ledger import PlaybackLedger
from cadence.pipeline.stages._time_limits import arriving_within
from cadence.pipeline.stages.turn.reply import Reply, Round, as_sent
from cadence.pipeline.stages.turn.speaker import Speaker
from cadence.pipeline.stages.turn.tool_rounds import ToolRounds
from cadence.pipeline.tools import ToolResult
from cadence.voice.tts import PhraseSplitter

logger = logging.getLogger(__name__)


class Generation:
    def __init__(
        self,
        generator: TurnGenerator,
        *,
        name: str,
        clock: Clock,
        ledger: PlaybackLedger,
        speaker: Speaker,
        tools: ToolRounds,
        tools_config: ToolsConfig,
        faults: FaultsConfig,
        first_phrase_max_words: int,
        yield_to_urgent: bool,
        urgent_work: UrgentWork,
    ) -> None:
        self._generator = generator
        self._name = name
        self._clock = clock
        self._ledger = ledger
        self._speaker = speaker
        self._tools = tools
        self._tools_config = tools_config
        self._faults = faults
        self._first_phrase_max_words = first_phrase_max_words
        self._yield_to_urgent = yield_to_urgent
        self._urgent_work = urgent_work

    async def generate(self, reply: Reply, prompt: list[Turn]) -> None:
        """Round after round: the generator's answer, then the tools it called, until it
        answers in words alone (or ends the call, or reaches ``tools.max_rounds``)."""
        limit_ms = self._faults.llm_timeout_ms
        conversation = list(prompt)
        try:
            while True:
                reply.rounds.append(round_ := Round())
                number = len(reply.rounds)
                last = number > self._tools_config.max_rounds
                calls = await self._stream_round(reply, conversation, limit_ms, last=last)
                if not calls or reply.error is not None:
                    break
                if last:
                    logger.warning(
                        "%s: reply %d called tools past tools.max_rounds (%d); not run",
                        self._name,
                        reply.index,
                        self._tools_config.max_rounds,
                    )
                    break
                round_.calls = calls = reply.with_unique_ids(calls)
                await self._speaker.speak_before_tools(reply)
                self._tools.start_filler(reply)
                conversation.append(Turn("agent", round_.text, tool_calls=as_sent(calls)))
                results = await self._tools.run(reply, number, round_, tuple(conversation))
                conversation += [Turn("tool", r.content, tool_call_id=r.call.id) for r in results]
                if reply.goodbye:
                    break  # the goodbye is what was said with the call (or tools.goodbye)
                if questions := asked_questions(results):
                    # The call needs the caller's word: the reply is the question.
                    await self._speaker.speak(reply, questions, self._clock.now_ms())
                    break
        except Exception as exc:  # the generator failed, or went quiet past its limit
            reply.error = (
                f"no reply text for {limit_ms:g} ms"
                if isinstance(exc, TimeoutError)
                else f"the generator failed: {exc!r}"
            )
            logger.warning("%s: reply %d: %s", self._name, reply.index, reply.error)
        last_words = ""
        if not reply.has_words:
            if reply.error is not None:
                last_words = self._faults.reply_fallback
            elif reply.goodbye:
                last_words = self._tools_config.goodbye
        await self._speaker.finish(reply, last_words)

    async def _stream_round(
        self, reply: Reply, conversation: list[Turn], limit_ms: float, *, last: bool
    ) -> tuple[ToolCall, ...]:
        """Stream one answer of the generator into the reply; the tools it calls."""
        calls: tuple[ToolCall, ...] = ()
        choice: ToolChoice = "none" if last else "auto"
        first_phrase = PhraseSplitter(self._first_phrase_max_words)
        urgent = not reply.has_words
        if urgent:
            self._urgent_work.started()
        try:
            # Closed here, not left to the garbage collector, when a barge-in cancels this
            # task while it waits on TTS: a remote backend's stream must not outlive the reply.
            async with aclosing(
                self._generator.stream(conversation, self._tools.specs, choice)
            ) as pieces:
                async for piece in arriving_within(pieces, limit_ms):
                    if piece.error:
                        reply.error = piece.error
                        logger.warning("%s: reply %d: %s", self._name, reply.index, piece.error)
                    if piece.text:
                        await self._speaker.speak(reply, piece.text, piece.at_ms)
                    calls = piece.tool_calls or calls
                    if urgent and first_phrase.feed(piece.text):
                        urgent = False
                        self._urgent_work.finished()
                        await self._in_time(self._ledger.wait_voiced(reply.index))
                    if not urgent and self._yield_to_urgent:
                        await self._urgent_work.quiet(self._clock)
        finally:
            if urgent:
                self._urgent_work.finished()
        return calls

    async def _in_time(self, wait: Coroutine[Any, Any, None]) -> None:
        """``wait``, for the urgent work's bound at most (none without ``yield_to_urgent``)."""
        if not self._yield_to_urgent:
            wait.close()
            return
        waiting = asyncio.ensure_future(wait)
        timer = asyncio.ensure_future(
            self._clock.sleep_until(self._clock.now_ms() + self._urgent_work.max_wait_ms)
        )
        try:
            await asyncio.wait({waiting, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
            timer.cancel()


def asked_questions(results: Sequence[ToolResult]) -> str:
    """What the calls that need the caller's word ask (``AskTheCaller``), as one utterance."""
    return " ".join(json.loads(r.content)["asked"] for r in results if r.outcome == "asked")
