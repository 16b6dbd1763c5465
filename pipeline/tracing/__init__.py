"""Per-turn latency tracing: anchor events in, JSON lines and OpenTelemetry spans out."""

from pipeline.tracing.anchors import (
    ALL_LATENCIES,
    STAGE_LATENCIES,
    VOICE_TO_VOICE,
    AnchorEvent,
    DerivedLatency,
)
from pipeline.tracing.session_tracer import session_tracer
from pipeline.tracing.sinks import (
    JSONLTraceSink,
    MemoryTraceSink,
    OTelTraceSink,
    TraceSink,
    otlp_tracer_provider,
    read_traces,
)
from pipeline.tracing.tracer import LatencyTracer, TraceError
from pipeline.tracing.turn_trace import DiscardedWork, TurnTrace

__all__ = [
    "ALL_LATENCIES",
    "STAGE_LATENCIES",
    "VOICE_TO_VOICE",
    "AnchorEvent",
    "DerivedLatency",
    "DiscardedWork",
    "JSONLTraceSink",
    "LatencyTracer",
    "MemoryTraceSink",
    "OTelTraceSink",
    "TraceError",
    "TraceSink",
    "TurnTrace",
    "otlp_tracer_provider",
    "read_traces",
    "session_tracer",
]
