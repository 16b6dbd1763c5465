"""The latency tracer: derived latencies, the JSON-lines log, OpenTelemetry spans, and the
observer that reads a session's frames into turns (tool calls here)."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path
from typing import ClassVar

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from cadence.core.clock import VirtualClock
from cadence.pipeline.config import TracingConfig
from cadence.pipeline.frames import (
    BargeInFrame,
    ToolCallFrame,
    ToolOutcome,
    TurnCommittedFrame,
)
from cadence.pipeline.tracing import (
    STAGE_LATENCIES,
    AnchorEvent,
    DiscardedWork,
    JSONLTraceSink,
    LatencyTracer,
    MemoryTraceSink,
    OTelTraceSink,
    ToolCallRecord,
    TraceError,
    TurnTrace,
    otlp_tracer_provider,
    read_traces,
    session_tracer,
)
from cadence.pipeline.tracing.turn_observer import TurnTraceObserver

A = AnchorEvent


async def scripted_turn(tracer: LatencyTracer, clock: VirtualClock) -> None:
    """A turn with a speculative decode: STT finishes before the endpoint is committed."""
    await clock.advance(1000)
    tracer.mark(A.USER_SPEECH_START)
    await clock.advance(2000)
    tracer.mark(A.USER_SPEECH_END)  # t = 3000
    await clock.advance(150)
    tracer.mark(A.STT_FINAL)  # speculative decode started at pause onset
    await clock.advance(50)
    tracer.mark(A.ENDPOINT)  # 3200
    await clock.advance(40)
    tracer.mark(A.LLM_FIRST_EMIT)  # 3240
    await clock.advance(30)
    tracer.mark(A.TTS_FIRST_AUDIO)  # 3270
    await clock.advance(5)
    tracer.mark(A.AUDIO_OUT_FIRST)  # 3275
    await clock.advance(45)
    tracer.mark(A.LLM_DONE)
    tracer.discard("stt_decode", start_ms=2500, end_ms=2700, reason="speech resumed")
    tracer.annotate("transcript", "book a table for two")


async def test_derived_latencies_of_a_scripted_turn(tmp_path: Path) -> None:
    clock = VirtualClock()
    log = tmp_path / "traces.jsonl"
    tracer = LatencyTracer("s1", clock, sinks=[JSONLTraceSink(log)])
    await scripted_turn(tracer, clock)
    turn = tracer.end_turn()
    assert turn is not None
    assert turn.latencies_ms == {
        "heard_voice_to_voice": None,  # a server alone cannot know what the caller heard
        "voice_to_voice": 275.0,
        "endpoint": 200.0,
        "stt": 0.0,  # the speculative decode finished before the endpoint: no wait on it
        "llm_first_emit": 40.0,  # counted from the endpoint, when the caller began waiting
        "tts_first_audio": 30.0,
        "transport": 5.0,
        "playback": None,
    }
    stages = [turn.latencies_ms[latency.name] for latency in STAGE_LATENCIES]
    assert sum(v for v in stages if v is not None) == turn.latencies_ms["voice_to_voice"]
    # Where the caller measured, the stages and playback add up to what it heard.
    heard = turn.model_copy(
        update={"events": {**turn.events, A.AUDIO_HEARD_FIRST: turn.events[A.AUDIO_OUT_FIRST] + 60}}
    )
    assert heard.latencies_ms["playback"] == 60.0
    assert heard.latencies_ms["heard_voice_to_voice"] == 275.0 + 60.0
    tracer.close()

    line = json.loads(log.read_text().splitlines()[0])
    assert line["schema"] == "cadence.turn/1"
    assert line["turn"] == 0
    assert line["discarded"] == [
        {"kind": "stt_decode", "start_ms": 2500.0, "end_ms": 2700.0, "reason": "speech resumed"}
    ]
    assert line["latencies_ms"]["voice_to_voice"] == 275.0
    assert read_traces(log) == [turn]


async def test_missing_anchors_give_no_latency() -> None:
    clock = VirtualClock()
    tracer = LatencyTracer("s1", clock)
    tracer.mark(A.USER_SPEECH_END, at_ms=100)
    tracer.mark(A.ENDPOINT, at_ms=300)
    turn = tracer.end_turn()
    assert turn is not None
    assert turn.latencies_ms["endpoint"] == 200
    assert turn.latencies_ms["voice_to_voice"] is None
    assert turn.latencies_ms["stt"] is None


async def test_turns_are_numbered_and_an_event_is_recorded_once() -> None:
    tracer = LatencyTracer("s1", VirtualClock())
    tracer.mark(A.ENDPOINT, at_ms=1)
    with pytest.raises(TraceError, match="endpoint already recorded"):
        tracer.mark(A.ENDPOINT, at_ms=2)
    first = tracer.end_turn()
    tracer.mark(A.ENDPOINT, at_ms=3)
    second = tracer.end_turn()
    assert (first and first.turn, second and second.turn) == (0, 1)
    assert tracer.end_turn() is None


async def test_a_broken_sink_does_not_break_the_session(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def write(self, turn: TurnTrace) -> None:
            raise OSError("disk full")

        def close(self) -> None:
            pass

    tracer = LatencyTracer("s1", VirtualClock(), sinks=[Broken()])
    tracer.mark(A.ENDPOINT)
    assert tracer.end_turn() is not None
    assert "disk full" in caplog.text


def test_a_corrupt_trace_log_names_the_line(tmp_path: Path) -> None:
    log = tmp_path / "t.jsonl"
    log.write_text('{"schema": "cadence.turn/1", "session_id": "s", "turn": 0}\n{"turn": -1}\n')
    with pytest.raises(ValueError, match=r"t\.jsonl:2: not a Cadence turn trace"):
        read_traces(log)


def otel_tracer(clock: VirtualClock) -> tuple[LatencyTracer, InMemorySpanExporter]:
    """A tracer of session ``s1`` whose only sink exports OpenTelemetry spans into memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sink = OTelTraceSink(provider.get_tracer("t"), "s1", clock)
    return LatencyTracer("s1", clock, sinks=[sink]), exporter


async def test_otel_spans_nest_session_turn_stage_and_mark_discarded_work() -> None:
    clock = VirtualClock()
    tracer, exporter = otel_tracer(clock)
    await scripted_turn(tracer, clock)
    tracer.close()

    spans = {span.name: span for span in exporter.get_finished_spans()}
    session, turn = spans["session"], spans["turn"]
    assert session.parent is None
    assert turn.parent is not None
    assert turn.parent.span_id == session.context.span_id
    for stage in ("endpoint", "stt", "llm_first_emit", "tts_first_audio", "transport"):
        span = spans[stage]
        assert span.parent is not None
        assert span.parent.span_id == turn.context.span_id
        assert span.attributes is not None
        assert span.attributes["cadence.discarded"] is False
    endpoint = spans["endpoint"]
    assert endpoint.end_time is not None
    assert endpoint.start_time is not None
    assert endpoint.end_time - endpoint.start_time == 200_000_000
    stt = spans["stt"]
    assert stt.attributes is not None
    assert stt.attributes["cadence.latency_ms"] == 0.0  # decoded ahead: no wait on it
    discarded = spans["stt_decode"]
    assert discarded.attributes is not None
    assert discarded.attributes["cadence.discarded"] is True
    assert discarded.attributes["cadence.reason"] == "speech resumed"
    assert [e.name for e in turn.events][:2] == ["user_speech_start", "user_speech_end"]


def tool_call(
    reply: int, name: str, start: float, end: float, outcome: ToolOutcome, round: int = 1
) -> ToolCallFrame:
    return ToolCallFrame(
        reply_index=reply,
        tool=name,
        round=round,
        started_ms=start,
        ended_ms=end,
        outcome=outcome,
        argument_bytes=24,
        result_bytes=0 if outcome == "cancelled" else 96,
    )


def test_tool_calls_go_into_the_turn_their_reply_answers() -> None:
    sink, clock = MemoryTraceSink(), VirtualClock()
    observer = TurnTraceObserver(LatencyTracer("s1", clock, sinks=[sink]), clock)
    # Reply 0 answered a transcript that changed: its call was cancelled with it.
    observer.on_frame("turn", tool_call(0, "find_table", 1100, 1250, "cancelled"))
    # Reply 1, generated before the commit, called a tool then; its second round ran after.
    observer.on_frame("turn", tool_call(1, "find_table", 1300, 1400, "ok"))
    observer.on_frame(
        "turn",
        TurnCommittedFrame(
            reply_index=1, at_ms=1450, user_text="a table", speech_end_ms=1250,
            transcript_at_ms=1280,
        ),
    )  # fmt: skip
    observer.on_frame("turn", tool_call(1, "book_table", 1500, 1700, "timeout", round=2))
    observer.on_frame("turn", BargeInFrame(reply_index=1, at_ms=1800, spoken_text="one moment"))
    # Its turn is closed: a call left running that ends now belongs to no turn.
    observer.on_frame("turn", tool_call(1, "book_table", 1750, 1900, "left_running", round=2))
    # Reply 2 never got its commit before the call ended.
    observer.on_frame("turn", tool_call(2, "find_table", 2000, 2100, "cancelled"))
    observer.close()

    answered, never = sink.turns
    assert answered.tools == [
        ToolCallRecord(
            name="find_table", round=1, start_ms=1300, end_ms=1400, outcome="ok",
            argument_bytes=24, result_bytes=96,
        ),
        ToolCallRecord(
            name="book_table", round=2, start_ms=1500, end_ms=1700, outcome="timeout",
            argument_bytes=24, result_bytes=96,
        ),
    ]  # fmt: skip
    assert answered.discarded == [
        DiscardedWork(
            kind="tool_call", start_ms=1100, end_ms=1250,
            reason="reply 0 dropped (find_table: cancelled)",
        )
    ]  # fmt: skip
    assert (never.tools, [work.kind for work in never.discarded]) == ([], ["tool_call"])
    assert never.discarded[0].reason.startswith("reply 2 dropped")


async def test_otel_exports_each_tool_call_as_a_span_of_its_turn() -> None:
    clock = VirtualClock()
    tracer, exporter = otel_tracer(clock)
    await scripted_turn(tracer, clock)  # events from 1000 to 3320 ms
    calls = [("find_table", 3210.0, 3230.0, "ok"), ("book_table", 3250.0, 3400.0, "timeout")]
    for name, start, end, outcome in calls:
        tracer.tool_call(
            ToolCallRecord(
                name=name, round=1, start_ms=start, end_ms=end, outcome=outcome,
                argument_bytes=31, result_bytes=7,
            )
        )  # fmt: skip
    tracer.close()

    spans = exporter.get_finished_spans()
    turn = next(span for span in spans if span.name == "turn")
    tools = [span for span in spans if span.name == "tool_call"]
    assert len(tools) == 2
    for span in tools:
        assert span.parent is not None
        assert span.parent.span_id == turn.context.span_id
    ok, late = sorted(tools, key=lambda span: span.start_time or 0)
    assert ok.attributes == {
        "cadence.tool.name": "find_table",
        "cadence.tool.round": 1,
        "cadence.tool.outcome": "ok",
        "cadence.tool.argument_bytes": 31,
        "cadence.tool.result_bytes": 7,
    }
    assert ok.status.status_code is StatusCode.UNSET
    assert late.attributes is not None
    assert late.attributes["cadence.tool.outcome"] == "timeout"
    assert (late.status.status_code, late.status.description) == (StatusCode.ERROR, "timeout")
    assert late.start_time is not None
    assert late.end_time is not None
    assert late.end_time - late.start_time == 150_000_000
    # The turn covers its calls: the last one ended after every anchor event.
    assert turn.end_time == late.end_time
    assert turn.start_time is not None
    assert turn.end_time - turn.start_time == 2_400_000_000  # 1000 → 3400 ms


class _OTLPReceiver(http.server.BaseHTTPRequestHandler):
    """A stand-in collector: records each OTLP/HTTP request it receives."""

    received: ClassVar[list[tuple[str, str, bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, self.headers["Content-Type"], body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


async def test_session_tracer_writes_the_log_and_exports_over_otlp(tmp_path: Path) -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), _OTLPReceiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
        config = TracingConfig(
            jsonl_path=str(tmp_path / "t.jsonl"), otlp_endpoint=endpoint, service_name="cadence-t"
        )
        clock = VirtualClock()
        tracer = session_tracer(config, "s-otlp", clock)
        await scripted_turn(tracer, clock)
        tracer.close()
        assert otlp_tracer_provider("cadence-t", endpoint).force_flush(10_000)
    finally:
        server.shutdown()
        thread.join()
    assert len(read_traces(tmp_path / "t.jsonl")) == 1
    request = ExportTraceServiceRequest()
    path, content_type, body = _OTLPReceiver.received[0]
    assert (path, content_type) == ("/v1/traces", "application/x-protobuf")
    request.ParseFromString(body)
    names = {
        span.name for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans
    }
    assert {"session", "turn", "endpoint", "stt", "stt_decode"} <= names


def test_tracing_off_means_no_sinks(tmp_path: Path) -> None:
    tracer = session_tracer(TracingConfig(jsonl_path=None), "s", VirtualClock())
    tracer.mark(A.ENDPOINT)
    tracer.close()
    assert list(tmp_path.iterdir()) == []
