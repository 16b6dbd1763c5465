"""Tool calls as a service streams them: each call in fragments (its deltas share an index),
several calls interleaved or one after the other, whole only once the stream has ended."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from cadence.llm.dialogue import ToolCall
from cadence.llm.remote.chunks import ToolCallDelta


class ToolCallError(Exception):
    """A streamed call that cannot be run; the message says why."""


@dataclass
class _Call:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


class ToolCallAssembler:
    """Gathers the deltas of a reply's calls. The first id and name a call gets are kept (some
    servers repeat them in every delta); the arguments' fragments are joined in the order they
    came, and not parsed: half of a JSON text is no JSON, and whether the whole is valid is the
    runtime's to answer the model."""

    def __init__(self) -> None:
        self._calls: dict[int, _Call] = {}

    def feed(self, deltas: Sequence[ToolCallDelta]) -> None:
        for delta in deltas:
            call = self._calls.setdefault(delta.index, _Call())
            call.id = call.id or delta.id
            if delta.function is not None:
                call.name = call.name or delta.function.name
                call.arguments.append(delta.function.arguments or "")

    def finish(self, made_up_ids: Iterator[str]) -> tuple[ToolCall, ...]:
        """The calls in the order of their indices. A call the service gave no id gets the
        next of ``made_up_ids``: its result must name it. ``ToolCallError`` for a call
        without a name: there is nothing to run."""
        calls = []
        for index, call in sorted(self._calls.items()):
            if not call.name:
                raise ToolCallError(f"malformed tool call: no function name (call {index})")
            calls.append(ToolCall(call.id or next(made_up_ids), call.name, "".join(call.arguments)))
        return tuple(calls)
