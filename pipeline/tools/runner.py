"""``ToolRunner``: runs the tool calls a reply asks for — validated, timed, and never failing
the call.

Whatever a call does wrong, the model gets an error result it can act on (say sorry, ask
again) and the caller hears a reply, never a stack trace: a tool it was not offered, arguments
that are not JSON or do not fit the parameters, a tool that raises (its exception's message
is passed on, trimmed; the traceback goes to the log), one that runs past its time limit.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from cadence.core.clock import Clock
from cadence.llm.dialogue import ToolCall
from cadence.llm.tools import ToolSpec
from cadence.pipeline.frames import ToolOutcome
from cadence.pipeline.tools.context import ToolContext
from cadence.pipeline.tools.tool import AskTheCaller, InvalidArgumentsError, Tool

logger = logging.getLogger(__name__)

MAX_ERROR_CHARS = 200
"""An exception's message is passed to the model up to this length."""

Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any]"]
"""Starts work that the session owns (a stage's ``spawn``), so that none outlives it."""


@dataclass(frozen=True)
class ToolResult:
    call: ToolCall
    outcome: ToolOutcome
    content: str
    """What the model reads: the tool's result, or ``{"error": …}``, as JSON text."""
    started_ms: float
    ended_ms: float


class ToolRunner:
    """The tools of one session, and the running of their calls."""

    def __init__(
        self, tools: Sequence[Tool], *, timeout_ms: int, clock: Clock, spawn: Spawn
    ) -> None:
        self._tools = {tool.name: tool for tool in tools}
        self._timeout_ms = timeout_ms
        self._clock = clock
        self._spawn = spawn

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        """What the model is offered."""
        return tuple(tool.spec for tool in self._tools.values())

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    async def run(
        self,
        call: ToolCall,
        context: ToolContext,
        on_late_result: Callable[[ToolResult], None] | None = None,
    ) -> ToolResult:
        """Run ``call``; its result, whatever happens. Cancelling the run cancels a tool that
        is ``cancellable``; one that is not finishes in the background, and its result goes to
        ``on_late_result``."""
        started_ms = self._clock.now_ms()
        tool = self._tools.get(call.name)
        if tool is None:
            offered = ", ".join(self._tools) or "none"
            message = f"no tool named {call.name!r} (offered: {offered})"
            return self._error(call, "unknown_tool", message, started_ms)
        try:
            arguments = tool.validate(call.arguments)
        except InvalidArgumentsError as exc:
            return self._error(call, "invalid_arguments", f"invalid arguments: {exc}", started_ms)
        limit_ms = tool.timeout_ms or self._timeout_ms
        work = self._spawn(self._call(tool, arguments, context), f"tool-{call.name}")
        try:
            async with asyncio.timeout(limit_ms / 1000):
                # Awaited directly, the task is cancelled with this coroutine; shielded, not.
                done = await (work if tool.cancellable else asyncio.shield(work))
        except TimeoutError:
            if not tool.cancellable:
                logger.warning(
                    "%s: tool %s ran past %d ms; it finishes in the background",
                    context.session_id,
                    call.name,
                    limit_ms,
                )
            message = f"the tool took longer than {limit_ms} ms"
            return self._error(call, "timeout", message, started_ms)
        except asyncio.CancelledError:
            if not tool.cancellable and on_late_result is not None:
                report = on_late_result

                def finished(task: asyncio.Task[str | Exception]) -> None:
                    if not task.cancelled():  # the session ended first
                        report(self._result(call, task.result(), started_ms, context))

                work.add_done_callback(finished)
            raise
        return self._result(call, done, started_ms, context)

    async def _call(
        self, tool: Tool, arguments: dict[str, Any], context: ToolContext
    ) -> str | Exception:
        """The tool's own run, a task of the session. Its failure is returned, not raised: a
        task of the session that raises would end the call."""
        try:
            return await tool.call(arguments, context)
        except Exception as exc:
            return exc

    def _result(
        self, call: ToolCall, done: str | Exception, started_ms: float, context: ToolContext
    ) -> ToolResult:
        if isinstance(done, str):
            return ToolResult(call, "ok", done, started_ms, self._clock.now_ms())
        if isinstance(done, AskTheCaller):
            logger.info("%s: tool %s asks the caller: %s", context.session_id, call.name, done)
            content = json.dumps({"asked": done.question})
            return ToolResult(call, "asked", content, started_ms, self._clock.now_ms())
        logger.warning("%s: tool %s failed: %r", context.session_id, call.name, done, exc_info=done)
        message = f"{type(done).__name__}: {done}"[:MAX_ERROR_CHARS]
        return self._error(call, "error", f"the tool failed ({message})", started_ms)

    def _error(
        self, call: ToolCall, outcome: ToolOutcome, message: str, started_ms: float
    ) -> ToolResult:
        content = json.dumps({"error": message})
        return ToolResult(call, outcome, content, started_ms, self._clock.now_ms())
