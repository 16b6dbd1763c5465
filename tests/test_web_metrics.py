"""The server's Prometheus metrics, fed turn traces as the sessions write them."""

from __future__ import annotations

import pytest

from cadence.core.priority import UrgentWork
from cadence.pipeline.tracing import AnchorEvent, DiscardedWork, TurnTrace
from cadence.web.metrics import ServerMetrics

A = AnchorEvent

ANSWERED = {
    A.USER_SPEECH_END: 1000.0,
    A.STT_FINAL: 1150.0,
    A.ENDPOINT: 1200.0,
    A.LLM_FIRST_EMIT: 1220.0,
    A.TTS_FIRST_AUDIO: 1300.0,
    A.AUDIO_OUT_FIRST: 1310.0,
}


def trace(events: dict[AnchorEvent, float], **annotations: bool | str) -> TurnTrace:
    return TurnTrace(session_id="web-test", turn=0, events=events, annotations=annotations)


def sample(metrics: ServerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_turn_traces_become_latency_histograms_and_outcome_counts() -> None:
    metrics = ServerMetrics()
    metrics.write(trace(ANSWERED))
    metrics.write(trace({**ANSWERED, A.INTERRUPTED: 2000.0}))
    metrics.write(trace({A.USER_SPEECH_END: 1000.0, A.ENDPOINT: 1200.0}))  # the caller hung up
    metrics.write(trace({A.USER_SPEECH_END: 1000.0, A.ENDPOINT: 1200.0}, withdrawn=True))
    metrics.write(trace({**ANSWERED, A.USER_SPEECH_END: 1400.0}))  # the reply began too early
    metrics.write(trace(ANSWERED, llm_error="HTTP 500"))  # the caller heard the fallback
    only_discarded = TurnTrace(
        session_id="web-test",
        turn=1,
        discarded=[DiscardedWork(kind="stt_decode", start_ms=0, end_ms=1, reason="speech")],
    )
    metrics.write(only_discarded)
    metrics.close()

    count = "cadence_stage_latency_seconds_count"
    assert sample(metrics, count, stage="voice_to_voice") == 2
    v2v_sum = sample(metrics, "cadence_stage_latency_seconds_sum", stage="voice_to_voice")
    assert v2v_sum == pytest.approx(0.62)
    # Only the turns answered after the end of speech are timed.
    assert sample(metrics, count, stage="endpoint") == 2
    # STT finished before the endpoint: a negative latency, in the lowest bucket.
    lowest = sample(metrics, "cadence_stage_latency_seconds_bucket", stage="stt", le="0.05")
    assert lowest == 2
    outcomes = {
        o: sample(metrics, "cadence_turns_total", outcome=o)
        for o in ("answered", "talked_over", "interrupted", "unanswered", "withdrawn", "failed")
    }
    assert outcomes == {
        "answered": 1,
        "talked_over": 1,
        "interrupted": 1,
        "unanswered": 1,
        "withdrawn": 1,
        "failed": 1,
    }


def test_the_urgent_jobs_in_progress_are_a_gauge() -> None:
    work = UrgentWork()
    metrics = ServerMetrics(work)
    assert sample(metrics, "cadence_urgent_jobs") == 0
    work.started()
    work.started()
    assert sample(metrics, "cadence_urgent_jobs") == 2
    work.finished()
    assert sample(metrics, "cadence_urgent_jobs") == 1
