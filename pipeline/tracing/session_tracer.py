"""Build a session's tracer from the ``tracing`` section of the configuration."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from cadence.core.clock import Clock
from cadence.pipeline.config import TracingConfig
from cadence.pipeline.tracing.sinks import (
    JSONLTraceSink,
    OTelTraceSink,
    TraceSink,
    otlp_tracer_provider,
)
from cadence.pipeline.tracing.tracer import LatencyTracer


def session_tracer(
    config: TracingConfig,
    session_id: str,
    clock: Clock,
    extra_sinks: Sequence[TraceSink] = (),
) -> LatencyTracer:
    """A tracer writing to the JSON-lines log and/or the OTLP endpoint that ``config`` names,
    and to ``extra_sinks`` (a server's metrics, a live page).

    Sessions of one process append to the same log, each through its own handle: every line
    is written whole and flushed at once, so lines of concurrent sessions never interleave.
    """
    sinks: list[TraceSink] = []
    if config.jsonl_path:
        sinks.append(JSONLTraceSink(Path(config.jsonl_path)))
    if config.otlp_endpoint:
        provider = otlp_tracer_provider(config.service_name, config.otlp_endpoint)
        sinks.append(OTelTraceSink(provider.get_tracer("cadence"), session_id, clock))
    return LatencyTracer(session_id, clock, [*sinks, *extra_sinks])
