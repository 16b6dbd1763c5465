"""Per-turn latency tracing: anchor events in, JSON lines and OpenTelemetry spans out."""

from cadence.pipeline.tracing.anchors import (
    ALL_LATENCIES,
    HEARD_VOICE_TO_VOICE,
    PLAYBACK,
    STAGE_LATENCIES,
    VOICE_TO_VOICE,
    AnchorEvent,
    DerivedLatency,
)
from cadence.pipeline.tracing.outcomes import (
    ANSWERED_IN_TIME,
    CALLER_MEASURED,
    TurnOutcome,
    heard_at_ms,
    talked_over_by_ms,
    turn_outcome,
    utterance_outcome,
)
from cadence.pipeline.tracing.session_tracer import session_tracer
from cadence.pipeline.tracing.sinks import (
    JSONLTraceSink,
    MemoryTraceSink,
    OTelTraceSink,
    TraceSink,
    otlp_tracer_provider,
    read_traces,
)
from cadence.pipeline.tracing.tracer import LatencyTracer, TraceError
from cadence.pipeline.tracing.turn_trace import DiscardedWork, ToolCallRecord, TurnTrace

__all__ = [
    "ALL_LATENCIES",
    "ANSWERED_IN_TIME",
    "CALLER_MEASURED",
    "HEARD_VOICE_TO_VOICE",
    "PLAYBACK",
    "STAGE_LATENCIES",
    "VOICE_TO_VOICE",
    "AnchorEvent",
    "DerivedLatency",
    "DiscardedWork",
    "JSONLTraceSink",
    "LatencyTracer",
    "MemoryTraceSink",
    "OTelTraceSink",
    "ToolCallRecord",
    "TraceError",
    "TraceSink",
    "TurnOutcome",
    "TurnTrace",
    "heard_at_ms",
    "otlp_tracer_provider",
    "read_traces",
    "session_tracer",
    "talked_over_by_ms",
    "turn_outcome",
    "utterance_outcome",
]
