"""``ToolRounds``: the tools a reply calls — running them, a filler while they run, and their
results when the reply is cut or comes too late.

Why a room of its own (Pipecat keeps function-call handling apart from the rest of the turn):
a tool call outlives the decisions around it. A read-only call runs at once, even for a reply
generated ahead of the commit; one that acts waits for the commit (it must not act for a reply
that may be dropped), and once it has run the reply is part of the conversation, heard or not.
A barge-in or a drop cancels the calls that can be cancelled and leaves the others to finish:
the history says which, and gets a late result when it comes. If the caller has heard nothing
``tools.filler_after_ms`` after the commit, ``tools.filler`` is said. Every call is traced
(``ToolCallFrame``). See docs/tools.md.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Sequence

from cadence.core.clock import Clock
from cadence.llm import Turn
from cadence.llm.dialogue import ToolCall
from cadence.llm.tools import ToolSpec
from cadence.pipeline.config import ToolsConfig
from cadence.pipeline.frames import ToolCallFrame, ToolOutcome
from cadence.pipeline.stage import Stage
from cadence.pipeline.stages.turn.history import History
from cadence.pipeline.stages.turn.reply import InFlight, Reply, Round
from cadence.pipeline.stages.turn.speaker import Speaker
from cadence.pipeline.tools import Keypad, Tool, ToolContext, ToolResult, ToolRunner

logger = logging.getLogger(__name__)

Abandoned = list[tuple[InFlight, ToolOutcome]]
"""Calls a cut reply left behind, and what became of them (to trace)."""


class ToolRounds:
    def __init__(
        self,
        stage: Stage,
        tools: Sequence[Tool],
        *,
        config: ToolsConfig,
        clock: Clock,
        history: History,
        speaker: Speaker,
        keypad: Keypad,
        session_id: str,
    ) -> None:
        self._stage = stage
        self._config = config
        self._clock = clock
        self._history = history
        self._speaker = speaker
        self._keypad = keypad
        self._session_id = session_id
        self._runner = ToolRunner(
            tools,
            timeout_ms=config.timeout_ms,
            clock=clock,
            spawn=lambda work, name: stage.spawn(work, name=name),
        )

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        """What the generator is offered."""
        return self._runner.specs

    async def run(
        self, reply: Reply, number: int, round_: Round, conversation: tuple[Turn, ...]
    ) -> list[ToolResult]:
        """Run round ``number``'s calls side by side; their results, in the order called."""
        context = ToolContext(
            self._session_id, reply.index, self._keypad, conversation, reply.end_call_after
        )
        return await asyncio.gather(
            *(self._run_call(reply, number, round_, call, context) for call in round_.calls)
        )

    def start_filler(self, reply: Reply) -> None:
        """The reply waits on its tools: a filler, if it has said nothing yet."""
        if reply.filler is None and self._config.filler and not reply.has_words:
            reply.filler = self._stage.spawn(self._filler(reply), name=f"filler-{reply.index}")

    def abandon(self, reply: Reply, why: str) -> Abandoned:
        """The reply is cut or dropped with calls in flight: those that can be cancelled will
        be (with the reply's generation); the others run on, and their results replace what
        the history says of them when they come (``_late_result``). Their outcomes, to
        trace."""
        abandoned: Abandoned = []
        for flight in reply.in_flight.values():
            tool = self._runner.get(flight.call.name)
            left = tool is not None and not tool.cancellable
            what = "it is still running" if left else "it was cancelled"
            content = json.dumps({"error": f"{why}; {what}"})
            reply.rounds[flight.round - 1].results[flight.call.id] = content
            abandoned.append((flight, "left_running" if left else "cancelled"))
        reply.in_flight.clear()
        return abandoned

    async def trace_abandoned(self, reply: Reply, abandoned: Abandoned) -> None:
        for flight, outcome in abandoned:
            await self._trace(reply, flight.round, flight.call, flight.started_ms, outcome, "")

    async def _run_call(
        self, reply: Reply, number: int, round_: Round, call: ToolCall, context: ToolContext
    ) -> ToolResult:
        tool = self._runner.get(call.name)
        if tool is not None and not tool.read_only:
            await reply.committed_event.wait()  # it acts: not for a reply that may be dropped
            reply.acted = True
        reply.in_flight[call.id] = InFlight(call, number, self._clock.now_ms())
        late = functools.partial(self._late_result, reply, number)
        result = await self._runner.run(call, context, on_late_result=late)
        del reply.in_flight[call.id]
        round_.results[call.id] = result.content
        await self._trace(reply, number, call, result.started_ms, result.outcome, result.content)
        return result

    def _late_result(self, reply: Reply, number: int, result: ToolResult) -> None:
        """A call left running at a barge-in finished: the history gets its real result."""
        reply.rounds[number - 1].results[result.call.id] = result.content
        self._history.late_result(reply, result.call.id, result.content)
        logger.info(
            "%s: tool %s finished after the caller interrupted (%s)",
            self._stage.name,
            result.call.name,
            result.outcome,
        )

    async def _filler(self, reply: Reply) -> None:
        """``tools.filler``, if the caller has heard nothing of the reply
        ``filler_after_ms`` after the commit (nothing of it was said yet, so nothing of it
        can have been heard)."""
        await reply.committed_event.wait()
        await self._clock.sleep_until(reply.committed_at_ms + self._config.filler_after_ms)
        if not reply.has_words and not reply.generated:
            await self._speaker.speak(reply, self._config.filler, self._clock.now_ms(), flush=True)

    async def _trace(
        self,
        reply: Reply,
        number: int,
        call: ToolCall,
        started_ms: float,
        outcome: ToolOutcome,
        content: str,
    ) -> None:
        await self._stage.push(
            ToolCallFrame(
                reply_index=reply.index,
                tool=call.name,
                round=number,
                started_ms=started_ms,
                ended_ms=self._clock.now_ms(),
                outcome=outcome,
                argument_bytes=len(call.arguments.encode()),
                result_bytes=len(content.encode()),
            )
        )
