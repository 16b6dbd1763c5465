"""Prometheus metrics of the server, served at ``/metrics``.

One registry per server (not the process-wide default), so that a test can run several
servers in one process and read each one's figures. Stage latencies come from the finished
turn traces: ``ServerMetrics`` is a trace sink every session of the server writes to.

With several worker processes on one port (``server.workers``), a scrape reaches whichever
worker the kernel picks, so each must answer for all of them: the pool sets
``PROMETHEUS_MULTIPROC_DIR`` before it starts them, every worker's values go to files there
(prometheus-client's multiprocess mode), and ``render`` reads them all — counters and
histograms summed, ``cadence_sessions`` per worker (``pid`` label; ``sum`` for the server),
``cadence_urgent_jobs`` summed over the live workers.
"""

from __future__ import annotations

import os
from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector

from cadence.core.priority import URGENT_WORK, UrgentWork
from cadence.pipeline.tracing import (
    ALL_LATENCIES,
    ANSWERED_IN_TIME,
    AnchorEvent,
    TurnOutcome,
    TurnTrace,
    turn_outcome,
)

CONTENT_TYPE = CONTENT_TYPE_LATEST

LATENCY_BUCKETS_S = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0)
"""Dense around the 500 ms voice-to-voice budget and its stage shares."""

MULTIPROCESS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus-client's multiprocess mode: read when it is imported, so set before a worker
process starts."""


class ErrorKind(StrEnum):
    SIGNALING = "signaling"
    """A visitor broke the signaling protocol."""
    TELEPHONY = "telephony"
    """A telephony peer (Twilio, Asterisk) sent a message it should not have: the message was
    ignored, or the call ended, as docs/telephony.md lists."""
    REFUSED = "refused"
    """A visitor was turned away at the session limit."""
    SESSION_FAILED = "session_failed"
    """A stage of a voice session raised; that call ended."""
    INTERNAL = "internal"
    """A call raised where it should not have: a bug, logged with its traceback."""
    CONNECTION_LOST = "connection_lost"
    """A connection failed or went quiet: WebRTC (ICE or DTLS failed, or the browser closed it
    alone), or an Asterisk that reported an error or stopped reading."""


class ServerMetrics:
    def __init__(self, urgent_work: UrgentWork = URGENT_WORK) -> None:
        self.shared = MULTIPROCESS_DIR_ENV in os.environ
        """Whether the figures are those of every worker process (see the module's doc)."""
        self._urgent_work = urgent_work
        self.registry = CollectorRegistry()
        self.stage_latency = Histogram(
            "cadence_stage_latency_seconds",
            "Latency of each stage of a turn and voice-to-voice, from the server's turn traces "
            "of the turns answered after the end of speech (outcome answered or interrupted). "
            "Server-side anchors: voice-to-voice runs from the VAD's estimate of the end of "
            "speech to the first reply frame handed to the transport, not to what the caller "
            "hears (a benchmark measures that: docs/report.md). `stt` and `llm_first_emit` are "
            "negative when speculation finished them early; those land in the lowest bucket.",
            ["stage"],
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.sessions = Gauge(
            "cadence_sessions",
            "Calls in progress now (with several workers, each worker's: `pid` label).",
            registry=self.registry,
            multiprocess_mode="liveall",
        )
        self.urgent_jobs = Gauge(
            "cadence_urgent_jobs",
            "Urgent jobs queued or running now, every call's: decodes that decide a turn, "
            "first pieces and first phrases (docs/cpu-budget.md). Rarely 0 means the cores "
            "are full: the rest of every reply is waiting for them.",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        if not self.shared:  # the files are written by `sample`: a function is never read there
            self.urgent_jobs.set_function(lambda: urgent_work.count)
        self.turns = Counter(
            "cadence_turns",
            "Finished turns by outcome (docs/trace-schema.md): answered, talked_over (the reply "
            "began before the VAD's end of speech), interrupted (barge-in), withdrawn (the "
            "caller went on), unanswered (no reply was sent), failed (a stage failed).",
            ["outcome"],
            registry=self.registry,
        )
        self.errors = Counter(
            "cadence_errors",
            "Calls ended or refused by an error.",
            ["kind"],
            registry=self.registry,
        )
        for kind in ErrorKind:
            self.errors.labels(kind.value)
        for outcome in TurnOutcome:
            self.turns.labels(outcome.value)

    def render(self) -> bytes:
        if not self.shared:
            return generate_latest(self.registry)
        self.sample()
        every_worker = CollectorRegistry()
        MultiProcessCollector(every_worker)  # type: ignore[no-untyped-call]  # unannotated
        return generate_latest(every_worker)

    def sample(self) -> None:
        """Write this worker's gauges that are read, not set (shared figures only: a server
        samples every second)."""
        self.urgent_jobs.set(self._urgent_work.count)

    def write(self, turn: TurnTrace) -> None:
        """Record a finished turn (the trace-sink side: every session writes here)."""
        if AnchorEvent.ENDPOINT not in turn.events:
            return  # only work thrown away, for a turn that never came
        outcome = turn_outcome(turn)
        self.turns.labels(outcome.value).inc()
        if outcome not in ANSWERED_IN_TIME:
            return  # a latency of a reply never heard, or heard too early, means nothing
        for latency in ALL_LATENCIES:
            value = turn.latencies_ms[latency.name]
            if value is not None:
                self.stage_latency.labels(latency.name).observe(value / 1000.0)

    def close(self) -> None:
        """A session's tracer closing: the metrics outlive every session, nothing to do."""
