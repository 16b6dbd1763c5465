"""Per-turn latency tracing: anchor events in, JSON lines and OpenTelemetry spans out."""

from cadence.pipeline.tracing.anchors import (
    ALL_LATENCIES,
    STAGE_LATENCIES,
    VOICE_TO_VOICE,
    AnchorEvent,
    DerivedLatency,
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
from cadence.pipeline.tracing.turn_trace import DiscardedWork, TurnTrace

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
