"""``LatencyTracer``: records a session's anchor events turn by turn and hands each finished
turn to its sinks."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from cadence.core.clock import Clock
from cadence.pipeline.tracing.anchors import AnchorEvent
from cadence.pipeline.tracing.sinks import TraceSink
from cadence.pipeline.tracing.turn_trace import Annotation, DiscardedWork, ToolCallRecord, TurnTrace

logger = logging.getLogger(__name__)


class TraceError(RuntimeError):
    """An anchor event was recorded twice in one turn: a bug in the stage that marked it."""


class LatencyTracer:
    """One per session. ``mark`` opens a turn if none is open; ``end_turn`` closes it."""

    def __init__(self, session_id: str, clock: Clock, sinks: Sequence[TraceSink] = ()) -> None:
        self.session_id = session_id
        self.clock = clock
        self._sinks = list(sinks)
        self._turn: TurnTrace | None = None
        self._next_index = 0
        self._closed = False

    @property
    def current(self) -> TurnTrace | None:
        return self._turn

    def mark(self, event: AnchorEvent, at_ms: float | None = None) -> float:
        """Record ``event`` at ``at_ms`` (back-dated) or now; returns the time recorded."""
        turn = self._open_turn()
        if event in turn.events:
            raise TraceError(
                f"session {self.session_id} turn {turn.turn}: {event.value} already recorded "
                f"at {turn.events[event]:.1f} ms"
            )
        when = self.clock.now_ms() if at_ms is None else at_ms
        turn.events[event] = when
        return when

    def discard(self, kind: str, start_ms: float, reason: str, end_ms: float | None = None) -> None:
        """Record speculative work that was thrown away; it ends now unless ``end_ms`` says."""
        end = self.clock.now_ms() if end_ms is None else end_ms
        self._open_turn().discarded.append(
            DiscardedWork(kind=kind, start_ms=start_ms, end_ms=end, reason=reason)
        )

    def tool_call(self, record: ToolCallRecord) -> None:
        """Record a tool call of the turn's reply."""
        self._open_turn().tools.append(record)

    def annotate(self, key: str, value: Annotation) -> None:
        self._open_turn().annotations[key] = value

    def end_turn(self) -> TurnTrace | None:
        """Close the open turn, write it to every sink and return it (``None`` if none open)."""
        turn, self._turn = self._turn, None
        if turn is None:
            return None
        for sink in self._sinks:
            try:
                sink.write(turn)
            except Exception:
                # A full disk or a dead collector must not end the call.
                logger.exception("session %s: trace sink %r failed", self.session_id, sink)
        return turn

    def close(self) -> None:
        """End the open turn and close the sinks. Idempotent."""
        if self._closed:
            return
        self.end_turn()
        self._closed = True
        for sink in self._sinks:
            try:
                sink.close()
            except Exception:
                logger.exception("session %s: closing trace sink %r failed", self.session_id, sink)

    def _open_turn(self) -> TurnTrace:
        if self._closed:
            raise RuntimeError(f"tracer of session {self.session_id} is closed")
        if self._turn is None:
            self._turn = TurnTrace(session_id=self.session_id, turn=self._next_index)
            self._next_index += 1
        return self._turn
