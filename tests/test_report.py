"""Latency budget reports: exact figures from synthetic traces, the summary schema, the plots,
variants side by side, tool calls, and `cadence report` reproducing a bench's summary from its
traces."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread
from typer.testing import CliRunner

from cadence.cli.app import app
from cadence.core.clock import VirtualClock
from cadence.pipeline.config import BudgetConfig
from cadence.pipeline.frames import ToolOutcome
from cadence.pipeline.tracing import (
    AnchorEvent,
    DiscardedWork,
    JSONLTraceSink,
    LatencyTracer,
    ToolCallRecord,
    TurnOutcome,
    TurnTrace,
)
from cadence.pipeline.tracing.turn_trace import Annotation
from cadence.report import (
    REPORT_FILE,
    RUN_FILE,
    SUMMARY_FILE,
    ReportSummary,
    VariantSummary,
    build_report,
)
from cadence.report.plots import PLOTS

A = AnchorEvent
STT_SPANS = (-50.0, 50.0, 150.0, 250.0, 350.0)
"""One turn each; with endpoint 200, LLM 100, TTS 40 and transport 10, voice-to-voice is
300, 400, 500, 600 and 700 ms."""


def make_turn(
    index: int,
    *,
    stt: float = 100.0,
    llm: float = 100.0,
    session: str = "s",
    annotations: dict[str, Annotation] | None = None,
    discarded: list[DiscardedWork] | None = None,
    tools: list[ToolCallRecord] | None = None,
    missing: tuple[AnchorEvent, ...] = (),
) -> TurnTrace:
    """A turn whose speech ends at 1000 ms, with endpoint 200, TTS 40 and transport 10 ms."""
    times = {A.USER_SPEECH_START: 0.0, A.USER_SPEECH_END: 1000.0, A.ENDPOINT: 1200.0}
    times[A.STT_FINAL] = times[A.ENDPOINT] + stt
    times[A.LLM_FIRST_EMIT] = times[A.STT_FINAL] + llm
    times[A.TTS_FIRST_AUDIO] = times[A.LLM_FIRST_EMIT] + 40.0
    times[A.AUDIO_OUT_FIRST] = times[A.TTS_FIRST_AUDIO] + 10.0
    return TurnTrace(
        session_id=session,
        turn=index,
        events={event: at for event, at in times.items() if event not in missing},
        discarded=discarded or [],
        tools=tools or [],
        annotations=annotations or {},
    )


def five_turns() -> list[TurnTrace]:
    decode = DiscardedWork(kind="stt_decode", start_ms=700, end_ms=900, reason="speech resumed")
    reply = DiscardedWork(kind="llm_generation", start_ms=800, end_ms=850, reason="changed")
    notes: list[dict[str, Annotation]] = [
        {"speculative_hit": True, "reference": "book a table for two",
         "transcript": "Book a table for two."},
        {"speculative_hit": True, "reference": "hello there", "transcript": "hello"},
        {"speculative_hit": False, "reference": "only a reference"},
        {"vad_speech_end_ms": 1020.0},
        {"vad_speech_end_ms": 1040},
    ]  # fmt: skip
    turns = [
        make_turn(i, stt=stt, annotations={"concurrency": 1, **note})
        for i, (stt, note) in enumerate(zip(STT_SPANS, notes, strict=True))
    ]
    turns[3] = turns[3].model_copy(update={"discarded": [decode, decode, reply]})
    return turns


def write_traces(path: Path, traces: list[TurnTrace]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(turn.to_json_line() + "\n" for turn in traces), encoding="utf-8")
    return path


def report(out: Path, traces: list[TurnTrace], budget: BudgetConfig | None = None) -> ReportSummary:
    return build_report(
        traces,
        out,
        budget=budget or BudgetConfig(),
        config={"bench": {"clips": 5}},
        machine="test machine, 2 cores",
        command="cadence bench --manifest m.jsonl --out x",
    )


def cadence(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("cadence")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)


def test_summary_figures_are_exact(tmp_path: Path) -> None:
    summary = report(tmp_path, five_turns())

    assert summary.turns == 5
    assert summary.sessions == 1
    assert summary.concurrency == 1
    v2v = summary.voice_to_voice_ms
    assert (v2v.count, v2v.p50, v2v.max) == (5, 500.0, 700.0)
    assert v2v.p95 == pytest.approx(680.0)  # linear interpolation between 600 and 700
    assert v2v.p99 == pytest.approx(696.0)
    # From the decision (endpoint, 1200 ms) to the first frame: STT + LLM 100 + TTS 40 +
    # transport 10 = 100 … 500 ms.
    decided = summary.decision_to_sound_ms
    assert (decided.count, decided.p50, decided.max) == (5, 300.0, 500.0)
    assert [row.decision_to_sound_ms for row in summary.per_turn] == [100, 200, 300, 400, 500]
    stt = summary.stages_ms["stt"]
    assert stt.p50 == 150.0
    assert stt.p95 == pytest.approx(330.0)
    assert stt.p99 == pytest.approx(346.0)
    assert summary.stages_ms["endpoint"].p99 == 200.0
    assert summary.stages_ms["transport"].p50 == 10.0
    assert summary.within_budget_fraction == 3 / 5  # 300, 400 and 500 ms are within 500
    assert summary.wer == pytest.approx(1 / 7)  # one word of seven dropped; case, punctuation
    assert summary.wer_turns == 2  # the reference without a transcript is left out
    assert (summary.speculation.hits, summary.speculation.misses) == (2, 3)  # 1 false + 2 decodes
    assert summary.speculation.hit_rate == pytest.approx(2 / 5)
    assert summary.discarded["stt_decode"].count == 2
    assert summary.discarded["stt_decode"].total_ms == 400.0
    assert summary.discarded["llm_generation"].total_ms == 50.0
    assert (summary.vad_end_error_ms.count, summary.vad_end_error_ms.p50) == (2, 30.0)
    assert summary.budget_ms == BudgetConfig().model_dump()
    assert summary.variants == {}
    assert summary.variant == "unlabelled"


def test_ceiling_early_endpoints_and_barge_ins_are_counted(tmp_path: Path) -> None:
    early = make_turn(1)
    early.events[A.ENDPOINT] = 990.0
    interrupted = make_turn(2)
    interrupted.events[A.INTERRUPTED] = 2000.0
    summary = report(tmp_path, [make_turn(0, llm=260.0), early, interrupted])
    assert summary.llm_over_ceiling == 1
    assert summary.endpoints_before_speech_end == 1
    assert summary.barge_ins == 1
    assert summary.outcomes[TurnOutcome.INTERRUPTED] == 1


def test_summary_json_matches_its_schema(tmp_path: Path) -> None:
    summary = report(tmp_path, five_turns())
    raw = json.loads((tmp_path / SUMMARY_FILE).read_text())
    assert ReportSummary.model_validate(raw) == summary
    assert raw["schema"] == "cadence.report/4"
    for key in ("turns", "concurrency", "voice_to_voice_ms", "stages_ms", "budget_ms",
                "within_budget_fraction", "wer", "speculation", "tools", "config",
                "machine"):  # fmt: skip
        assert key in raw
    assert set(raw["voice_to_voice_ms"]) >= {"p50", "p95", "p99", "max"}
    assert list(raw["stages_ms"]) == [
        "endpoint", "stt", "llm_first_emit", "tts_first_audio", "transport"
    ]  # fmt: skip
    assert set(raw["speculation"]) >= {"hits", "misses"}
    assert raw["config"] == {"bench": {"clips": 5}}
    assert raw["machine"] == "test machine, 2 cores"

    raw["stages_ms"].pop("stt")
    with pytest.raises(ValueError, match="stages_ms must have exactly"):
        ReportSummary.model_validate(raw)


def test_report_page_and_plots(tmp_path: Path) -> None:
    report(tmp_path, five_turns())
    page = (tmp_path / REPORT_FILE).read_text()
    assert "Machine: test machine, 2 cores" in page
    assert "`cadence bench --manifest m.jsonl --out x`" in page
    assert "| STT | 100 | 150 ✗ | 330 ✗ | 346 ✗ | 5 |" in page
    assert "| endpoint | 200 | 200 ✓ | 200 ✓ | 200 ✓ | 5 |" in page
    assert "Within the 500 ms budget: 3 of 5 caller turns (60%)" in page
    assert page.index("## What became of each turn") < page.index("## Voice-to-voice")
    assert "| answered | 5 | 100% |" in page
    assert "Decision → sound (the end-of-turn decision → the same anchor" in page
    assert "p50 300, p95 480, max 500 ms." in page
    assert "The largest stage is endpoint: 200 ms at the median" in page
    assert "Over their share at the median: STT (+50 ms)." in page
    assert "| stt_decode | 2 | 400 |" in page
    for name in PLOTS:
        assert f"]({name})" in page
        png = tmp_path / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        pixels = imread(png)
        assert pixels.shape[0] > 300
        assert pixels.shape[1] > 600
        assert float(np.std(pixels)) > 0.05, f"{name} is blank"


def test_waterfall_handles_negative_spans_and_caps_the_turns(tmp_path: Path) -> None:
    many = [make_turn(i, stt=-80.0 if i % 2 else 60.0, llm=-20.0) for i in range(100)]
    report(tmp_path, many)
    assert imread(tmp_path / "waterfall.png").shape[0] < 1800  # 40 rows, not 100


def test_variants_side_by_side(tmp_path: Path) -> None:
    slow = [
        make_turn(i, stt=stt + 200, session=f"b{i}", annotations={"variant": "no_speculation"})
        for i, stt in enumerate(STT_SPANS)
    ]
    full = [
        make_turn(i, stt=stt, session=f"a{i}", annotations={"variant": "full"})
        for i, stt in enumerate(STT_SPANS)
    ]
    summary = report(tmp_path, slow + full)
    assert summary.variant == "full"  # the primary even though it comes second
    assert list(summary.variants) == ["no_speculation", "full"]
    assert summary.voice_to_voice_ms.p50 == 500.0
    assert summary.variants["no_speculation"].voice_to_voice_ms.p50 == 700.0
    # The top level is the full variant's summary, field for field.
    assert summary.variants["full"].model_dump() == summary.model_dump(
        include=set(VariantSummary.model_fields)
    )
    page = (tmp_path / REPORT_FILE).read_text()
    assert "| voice-to-voice p50 | 500 | 700 (+200 ms, ×1.40) |" in page
    assert "| variant | `full` | `no_speculation` |" in page


def test_an_unanswered_turn_counts_as_a_miss_and_times_no_stage(tmp_path: Path) -> None:
    unanswered = make_turn(5, missing=(A.TTS_FIRST_AUDIO, A.AUDIO_OUT_FIRST))
    summary = report(tmp_path, [*five_turns(), unanswered])
    assert summary.turns == 6
    assert summary.outcomes[TurnOutcome.UNANSWERED] == 1
    assert summary.voice_to_voice_ms.count == 5
    assert summary.voice_to_voice_ms.p50 == 500.0
    assert summary.within_budget_fraction == 3 / 6  # the caller waited in vain: a miss
    for stage in ("endpoint", "llm_first_emit", "tts_first_audio", "transport"):
        assert summary.stages_ms[stage].count == 5


async def test_traces_from_the_tracer_report_their_spans(tmp_path: Path) -> None:
    clock = VirtualClock()
    tracer = LatencyTracer("live", clock, sinks=[JSONLTraceSink(tmp_path / "traces.jsonl")])
    steps = [(1000, A.USER_SPEECH_END), (200, A.ENDPOINT), (90, A.STT_FINAL),
             (120, A.LLM_FIRST_EMIT), (40, A.TTS_FIRST_AUDIO), (5, A.AUDIO_OUT_FIRST)]  # fmt: skip
    for after_ms, event in steps:
        await clock.advance(after_ms)
        tracer.mark(event)
    tracer.close()
    result = cadence("report", str(tmp_path / "traces.jsonl"), "--out", str(tmp_path / "r"))
    assert result.returncode == 0, result.stderr
    summary = ReportSummary.model_validate_json((tmp_path / "r" / SUMMARY_FILE).read_text())
    assert summary.voice_to_voice_ms.p50 == 455.0
    assert summary.stages_ms["llm_first_emit"].p50 == 120.0
    assert summary.config is None
    assert str(summary.command).startswith("cadence report ")
    assert (tmp_path / "r" / RUN_FILE).is_file()


def test_cadence_report_reproduces_the_bench_summary(tmp_path: Path) -> None:
    bench = tmp_path / "bench"
    traces = write_traces(bench / "traces.jsonl", five_turns())
    budget = BudgetConfig(voice_to_voice=450.0, stt=120.0)
    summary = report(bench, five_turns(), budget)
    assert summary.within_budget_fraction == 2 / 5

    result = cadence("report", str(traces), "--out", str(tmp_path / "rebuilt"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "rebuilt" / SUMMARY_FILE).read_text() == (bench / SUMMARY_FILE).read_text()
    assert (tmp_path / "rebuilt" / REPORT_FILE).read_text() == (bench / REPORT_FILE).read_text()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "no turn traces"),
        ("\n\n", "no turn traces"),
        ('{"schema": "cadence.turn/1", "session_id": "s", "turn": 0}\nnot json\n', ":2: not a "),
    ],
)
def test_empty_or_invalid_traces_fail_clearly(tmp_path: Path, content: str, message: str) -> None:
    traces = tmp_path / "traces.jsonl"
    traces.write_text(content)
    result = CliRunner().invoke(app, ["report", str(traces), "--out", str(tmp_path / "r")])
    assert result.exit_code == 1
    assert message in result.stderr
    assert not (tmp_path / "r").exists()


def test_missing_traces_fail_clearly(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["report", str(tmp_path / "none.jsonl"), "--out", "r"])
    assert result.exit_code == 1
    assert "No such file" in result.stderr


def test_build_report_refuses_no_traces(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no turns"):
        report(tmp_path, [])


def test_config_replaces_the_recorded_budget(tmp_path: Path) -> None:
    traces = write_traces(tmp_path / "bench" / "traces.jsonl", five_turns())
    report(tmp_path / "bench", five_turns())
    config = tmp_path / "c.yaml"
    config.write_text("budget:\n  voice_to_voice: 350\n")
    out = tmp_path / "r"
    result = CliRunner().invoke(app, ["report", str(traces), "--out", str(out), "-c", str(config)])
    assert result.exit_code == 0, result.output
    summary = ReportSummary.model_validate_json((out / SUMMARY_FILE).read_text())
    assert summary.within_budget_fraction == 1 / 5
    assert summary.config is not None
    assert summary.config["budget"]["voice_to_voice"] == 350
    assert summary.machine == "test machine, 2 cores"  # still the run's, from run.json


def test_a_broken_run_file_fails_clearly(tmp_path: Path) -> None:
    traces = write_traces(tmp_path / "traces.jsonl", five_turns())
    (tmp_path / RUN_FILE).write_text('{"machine": 3}')
    result = CliRunner().invoke(app, ["report", str(traces), "--out", str(tmp_path / "r")])
    assert result.exit_code == 1
    assert "not a Cadence run description" in result.stderr


def every_outcome() -> list[TurnTrace]:
    """One scripted turn of each outcome, speech ending at 1000 ms (``make_turn``), and two
    turns a caller measured: one it heard 80 ms after the server sent it, one it never heard."""
    talked_over = make_turn(1)
    talked_over.events[A.USER_SPEECH_END] = 1600.0  # the reply went out at 1450: 150 ms early
    talked_over.events[A.INTERRUPTED] = 1500.0  # and the caller, still speaking, cut it
    interrupted = make_turn(3)
    interrupted.events[A.INTERRUPTED] = 2500.0
    heard = make_turn(6, annotations={"caller_measured": True})
    heard.events[A.AUDIO_HEARD_FIRST] = heard.events[A.AUDIO_OUT_FIRST] + 80.0
    return [
        make_turn(0, annotations={"reference": "a b c", "transcript": "a b c"}),
        talked_over,
        make_turn(2, stt=900.0, annotations={"withdrawn": True}),
        interrupted,
        make_turn(4, missing=(A.TTS_FIRST_AUDIO, A.AUDIO_OUT_FIRST)),  # the call ended first
        make_turn(5, annotations={"llm_error": "HTTP 500: overloaded"}),
        heard,
        make_turn(7, annotations={"caller_measured": True}),  # sent, never heard
    ]


def test_every_turn_has_one_outcome_and_misses_count_against_the_budget(tmp_path: Path) -> None:
    summary = report(tmp_path, every_outcome())
    assert summary.turns == 8
    assert summary.outcomes == {
        TurnOutcome.ANSWERED: 2,  # turns 0 and 6
        TurnOutcome.TALKED_OVER: 1,
        TurnOutcome.WITHDRAWN: 1,
        TurnOutcome.INTERRUPTED: 1,
        TurnOutcome.UNANSWERED: 2,  # turn 4 (nothing sent) and 7 (sent, never heard)
        TurnOutcome.FAILED: 1,
    }
    assert summary.barge_ins == 2  # the talked-over reply was cut too
    assert (summary.talked_over_by_ms.count, summary.talked_over_by_ms.p50) == (1, 150.0)
    # Not every turn was measured by a caller: the report ends at the server's anchor.
    assert summary.end_anchor == "audio_out_first"
    # Answered after the end of speech: 0, 3 and 6, each 450 ms after it (server side).
    assert (summary.voice_to_voice_ms.count, summary.voice_to_voice_ms.p50) == (3, 450.0)
    assert summary.stages_ms["stt"].count == 3
    # Every caller turn but the withdrawn one counts; only the three answered meet 500 ms.
    assert summary.budget_turns == 7
    assert summary.within_budget_fraction == 3 / 7
    assert summary.wer == 0.0
    assert [row.outcome for row in summary.per_turn] == [
        TurnOutcome.ANSWERED, TurnOutcome.TALKED_OVER, TurnOutcome.WITHDRAWN,
        TurnOutcome.INTERRUPTED, TurnOutcome.UNANSWERED, TurnOutcome.FAILED,
        TurnOutcome.ANSWERED, TurnOutcome.UNANSWERED,
    ]  # fmt: skip
    assert summary.per_turn[1].voice_to_voice_ms == -150.0
    page = (tmp_path / "report.md").read_text()
    assert "| **talked over** (heard before the caller finished) | 1 | 12% |" in page
    assert "Barge-ins (the caller cut a reply, whatever its outcome): 2." in page
    assert "Within the 500 ms budget: 3 of 7 caller turns (43%)" in page
    assert "| – | s · 1 | – | talked_over | -150 |" in page


def test_a_report_of_turns_the_caller_measured_ends_at_what_it_heard(tmp_path: Path) -> None:
    turns = [make_turn(i, annotations={"caller_measured": True}) for i in range(3)]
    for extra, turn in zip((40.0, 80.0, 120.0), turns, strict=True):
        turn.events[A.AUDIO_HEARD_FIRST] = turn.events[A.AUDIO_OUT_FIRST] + extra
    summary = report(tmp_path, turns)
    assert summary.end_anchor == "audio_heard_first"
    assert summary.voice_to_voice_ms.p50 == 450.0 + 80.0
    assert summary.server_voice_to_voice_ms.p50 == 450.0
    assert (summary.playback_ms.p50, summary.playback_ms.max) == (80.0, 120.0)
    page = (tmp_path / "report.md").read_text()
    assert "the first reply sound the caller heard (`audio_heard_first`" in page
    assert "then playback to the caller's ear: p50 80, p95 116 ms" in page


def call(
    name: str, start: float, end: float, outcome: ToolOutcome = "ok", round: int = 1
) -> ToolCallRecord:
    return ToolCallRecord(
        name=name, round=round, start_ms=start, end_ms=end, outcome=outcome,
        argument_bytes=20, result_bytes=80,
    )  # fmt: skip


def test_tool_calls_are_reported_over_the_turns_that_made_them(tmp_path: Path) -> None:
    # Speech ends at 1000 and every answered turn is heard at 1450 (``make_turn``).
    turns = [
        make_turn(0),
        make_turn(1, tools=[call("weather", 1250, 1350)]),  # 100 ms
        # Two calls of one round at once, 1250 → 1450: 200 ms, not the 300 they sum to.
        make_turn(2, tools=[call("weather", 1250, 1450), call("clock", 1300, 1400, "timeout")]),
        # Two rounds one after the other, 1250 → 1550: 300 ms, the gap between them included.
        make_turn(3, tools=[call("find", 1250, 1300), call("book", 1320, 1550, "error", round=2)]),
        # Never heard: its 400 ms of tools count, but it has no voice-to-voice to share.
        make_turn(
            4,
            tools=[call("find", 1250, 1650, "cancelled")],
            missing=(A.TTS_FIRST_AUDIO, A.AUDIO_OUT_FIRST),
        ),
    ]
    summary = report(tmp_path, turns)
    tools = summary.tools
    assert tools.turns == 4
    assert tools.calls == {
        "ok": 3, "asked": 0, "error": 1, "timeout": 1, "invalid_arguments": 0, "unknown_tool": 0,
        "cancelled": 1, "left_running": 0,
    }  # fmt: skip
    assert (tools.time_ms.count, tools.time_ms.p50, tools.time_ms.max) == (4, 250.0, 400.0)
    assert tools.time_ms.p95 == pytest.approx(300.0 + 0.85 * 100.0)  # between 300 and 400
    share = tools.voice_to_voice_share
    assert share.count == 3  # of 100, 200 and 300 ms, each against 450 ms
    assert share.p50 == pytest.approx(200 / 450)
    assert share.p95 == pytest.approx((200 + 0.9 * 100) / 450)
    # The turns without tools are reported as before.
    assert summary.voice_to_voice_ms.count == 4
    assert summary.outcomes[TurnOutcome.UNANSWERED] == 1

    page = (tmp_path / REPORT_FILE).read_text()
    section = page[page.index("## Tools") :]
    assert page.index("## Where the milliseconds go") < page.index("## Tools")
    assert "4 of 5 turns called tools, 6 calls in all." in section
    assert "| timeout | 1 |" in section
    assert "| **all** | **6** |" in section
    assert "p50 250, p95 385 ms over 4 turns." in section
    assert "p50 44%, p95 64% over the 3 of them answered after the end of speech." in section


def test_a_report_without_tool_calls_says_so(tmp_path: Path) -> None:
    summary = report(tmp_path, five_turns())
    assert summary.tools.turns == 0
    assert set(summary.tools.calls.values()) == {0}
    assert (summary.tools.time_ms.count, summary.tools.time_ms.p50) == (0, None)
    page = (tmp_path / REPORT_FILE).read_text()
    assert "## Tools\n\nNo tool calls: none of the 5 turns called a tool." in page
