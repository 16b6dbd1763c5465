"""Where finished turn traces go: a JSON-lines log, OpenTelemetry, or both."""

from __future__ import annotations

import functools
import logging
import os
import time
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from cadence.core.clock import Clock
from cadence.pipeline.tracing.anchors import STAGE_LATENCIES
from cadence.pipeline.tracing.turn_trace import ToolCallRecord, TurnTrace

logger = logging.getLogger(__name__)


class TraceSink(Protocol):
    def write(self, turn: TurnTrace) -> None: ...

    def close(self) -> None: ...


class MemoryTraceSink:
    """Keeps every finished turn in ``turns``: for a benchmark or a test that reads them."""

    def __init__(self) -> None:
        self.turns: list[TurnTrace] = []

    def write(self, turn: TurnTrace) -> None:
        self.turns.append(turn)

    def close(self) -> None:
        """Nothing to release: the turns stay readable."""


_LOG_WRITER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cadence-trace-log")
"""One thread appends every session's lines, in order: ``fsync`` can take tens of
milliseconds on a busy disk, which the event loop pacing every call's audio must not wait."""


class JSONLTraceSink:
    """Appends one line per turn, durably — written, flushed and synced to the disk as the turn
    ends — so a crash loses at most the turn in flight. Lines of concurrent sessions never
    interleave: each is one write by the one log thread."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._pending: list[Future[None]] = []
        self._closed = False

    def write(self, turn: TurnTrace) -> None:
        if self._closed:
            raise RuntimeError(f"trace log {self.path} is closed")
        self._pending = [future for future in self._pending if not future.done()]
        future = _LOG_WRITER.submit(_append_durably, self.path, turn.to_json_line() + "\n")
        future.add_done_callback(self._report_failure)
        self._pending.append(future)

    def close(self) -> None:
        """Wait until every line of this sink is on the disk."""
        self._closed = True
        futures.wait(self._pending)
        self._pending.clear()

    def _report_failure(self, future: Future[None]) -> None:
        if (error := future.exception()) is not None:
            # A full disk must not end the call; the log says which file lost a line.
            logger.error("trace log %s: a turn could not be written: %r", self.path, error)


def _append_durably(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as file:
        file.write(line)
        file.flush()
        os.fsync(file.fileno())


def read_traces(path: Path) -> list[TurnTrace]:
    """Read a JSON-lines trace log; an invalid line raises with its line number."""
    traces = []
    with path.open(encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                traces.append(TurnTrace.from_json_line(line))
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: not a Cadence turn trace: {exc}") from exc
    return traces


class OTelTraceSink:
    """Exports a session as OpenTelemetry spans: session → turn → stage, discarded work and
    tool call.

    The session clock is monotonic and per session; spans need wall-clock nanoseconds, so the
    offset between the two is taken once, when the session starts.
    """

    def __init__(self, tracer: Tracer, session_id: str, clock: Clock) -> None:
        self._tracer = tracer
        self._clock = clock
        self._epoch_ns = time.time_ns() - self._ns(clock.now_ms())
        self._session: Span | None = tracer.start_span(
            "session",
            start_time=self._to_wall(clock.now_ms()),
            attributes={"cadence.session_id": session_id},
        )

    def write(self, turn: TurnTrace) -> None:
        if self._session is None:
            raise RuntimeError("the session span is already closed")
        times = [*turn.events.values()]
        times += [t for work in turn.discarded for t in (work.start_ms, work.end_ms)]
        times += [t for call in turn.tools for t in (call.start_ms, call.end_ms)]
        if not times:
            return
        context = trace.set_span_in_context(self._session)
        span = self._tracer.start_span(
            "turn",
            context=context,
            start_time=self._to_wall(min(times)),
            attributes={"cadence.session_id": turn.session_id, "cadence.turn": turn.turn},
        )
        for event, at_ms in sorted(turn.events.items(), key=lambda item: item[1]):
            span.add_event(event.value, timestamp=self._to_wall(at_ms))
        for name, value in turn.latencies_ms.items():
            if value is not None:
                span.set_attribute(f"cadence.latency_ms.{name}", value)
        turn_context = trace.set_span_in_context(span)
        for latency in STAGE_LATENCIES:
            if latency.start in turn.events and latency.end in turn.events:
                start, end = turn.events[latency.start], turn.events[latency.end]
                self._tracer.start_span(
                    latency.name,
                    context=turn_context,
                    start_time=self._to_wall(min(start, end)),
                    attributes={
                        "cadence.latency_ms": turn.latencies_ms[latency.name] or 0.0,
                        "cadence.discarded": False,
                    },
                ).end(end_time=self._to_wall(max(start, end)))
        for work in turn.discarded:
            self._tracer.start_span(
                work.kind,
                context=turn_context,
                start_time=self._to_wall(work.start_ms),
                attributes={"cadence.discarded": True, "cadence.reason": work.reason},
            ).end(end_time=self._to_wall(work.end_ms))
        for call in turn.tools:
            self._tool_span(call, turn_context)
        span.end(end_time=self._to_wall(max(times)))

    def _tool_span(self, call: ToolCallRecord, turn_context: Context) -> None:
        """A tool call as a ``tool_call`` span: sizes, never values (they may hold what the
        caller said); any outcome but ``ok`` is an error, so a trace backend shows it as one."""
        span = self._tracer.start_span(
            "tool_call",
            context=turn_context,
            start_time=self._to_wall(call.start_ms),
            attributes={
                "cadence.tool.name": call.name,
                "cadence.tool.round": call.round,
                "cadence.tool.outcome": call.outcome,
                "cadence.tool.argument_bytes": call.argument_bytes,
                "cadence.tool.result_bytes": call.result_bytes,
            },
        )
        if call.outcome != "ok":
            span.set_status(Status(StatusCode.ERROR, call.outcome))
        span.end(end_time=self._to_wall(call.end_ms))

    def close(self) -> None:
        if self._session is not None:
            self._session.end(end_time=self._to_wall(self._clock.now_ms()))
            self._session = None

    @staticmethod
    def _ns(ms: float) -> int:
        return round(ms * 1_000_000)

    def _to_wall(self, ms: float) -> int:
        return self._epoch_ns + self._ns(ms)


@functools.cache
def otlp_tracer_provider(service_name: str, endpoint: str) -> TracerProvider:
    """The process-wide provider that batches Cadence spans to ``endpoint`` over OTLP/HTTP.
    Its batches are flushed at interpreter exit (the SDK registers that)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider
