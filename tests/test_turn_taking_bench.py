"""`cadence bench-turns`: the trade-off curve's maths, the live figures read off traces, the
text model's out-of-domain accuracy, the report's fields — pure and fast — and one real
paused clip through the real pipeline."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cadence.pipeline.config import EndOfTurnConfig
from cadence.pipeline.tracing import CALLER_MEASURED, AnchorEvent, TurnTrace, utterance_outcome
from cadence.tooling.bench.interruptions import (
    noise_sounds,
    real_short_words,
    summarize,
)
from cadence.tooling.bench.manifest import ManifestClip, read_manifest
from cadence.tooling.bench.pause_points import read_words
from cadence.tooling.bench.paused_clips import make_paused_clips
from cadence.tooling.bench.tradeoff import (
    PausedCase,
    at_setting,
    continuous_curve,
    field_figures,
    fixed_curve,
    in_bucket,
)
from cadence.tooling.bench.turn_taking import (
    JSON_FILE,
    MARKDOWN_FILE,
    PLOT_FILE,
    TurnClip,
    live_figures,
)
from cadence.tooling.bench.turn_taking_offline import (
    Heard,
    offline_cases,
    reference_prefixes,
    text_model_accuracy,
    tradeoff_figures,
)
from cadence.tooling.bench.turn_taking_report import write_turn_taking
from cadence.voice.audio import level_db

SPEECH = Path(__file__).parent / "data" / "speech"
OPTIONS = EndOfTurnConfig(min_wait_ms=200, max_wait_ms=1500, confidence=0.9, pause_scale_ms=200)


def _cases(ps: list[float]) -> list[PausedCase]:
    silences = [300, 500, 700, 1000, 1500]
    return [
        PausedCase(f"c{i}", s / 1000, float(s), p)
        for i, (s, p) in enumerate(zip(silences, ps, strict=True))
    ]


# ---------------------------------------------------------------------------------- the curve


def _wait(p: float, confidence: float) -> float:
    """The continuous rule at OPTIONS, written out: 200 ms a unit of log-odds short."""

    def logit(x: float) -> float:
        return math.log(x / (1 - x))

    return min(max(200 * (logit(confidence) - logit(p)), 200.0), 1500.0)


def test_a_fixed_wait_answers_into_every_pause_longer_than_it() -> None:
    curve = fixed_curve(_cases([0.0] * 5), [0.9, 0.9], waits_ms=[100, 600, 1000, 1500, 2000])
    rates = {p.setting: p.talk_over_rate for p in curve.points}
    assert rates == {100: 1.0, 600: 3 / 5, 1000: 1 / 5, 1500: 0.0, 2000: 0.0}
    assert all(p.median_wait_ms == p.setting == p.p90_wait_ms for p in curve.points)
    # A silence exactly as long as the wait is not answered into (the speech resumes first).
    assert curve.needed is not None
    assert curve.needed.setting == 1500
    assert (curve.cases, curve.complete_turns) == (5, 2)


def test_the_continuous_rule_is_swept_over_its_confidence() -> None:
    # Every pause scores 0.1: at confidence c each waits 200·(logit c − logit 0.1), so the
    # pauses longer than that are cut off.
    cases = _cases([0.1, 0.1, 0.1, 0.1, 0.1])
    ends = [0.95, 0.95, 0.45]
    curve = continuous_curve(cases, ends, OPTIONS, confidences=[0.5, 0.9, 0.99, 0.999])
    by = {p.setting: p for p in curve.points}
    assert _wait(0.1, 0.5) == pytest.approx(439.4, abs=0.1)  # cuts off 500, 700, 1000, 1500
    assert by[0.5].talk_over_rate == 4 / 5
    assert by[0.9].talk_over_rate == 2 / 5  # 879 ms: 1000 and 1500
    assert by[0.99].talk_over_rate == 1 / 5  # 1,358 ms: 1500
    assert by[0.999].talk_over_rate == 0.0  # capped at 1,500: a silence as long is not cut
    assert curve.needed is not None
    assert curve.needed.setting == 0.999
    # The turns that ended pay the rule's wait at their P: median of three, and the mean.
    paid = sorted(_wait(p, 0.999) for p in ends)
    assert by[0.999].median_wait_ms == pytest.approx(paid[1])
    assert by[0.999].mean_wait_ms == pytest.approx(sum(paid) / 3)
    # A pause the model takes for the end is cut off at every confidence but the highest.
    fooled = continuous_curve(_cases([0.1, 0.1, 0.1, 0.1, 0.999]), ends, OPTIONS, [0.5, 0.9])
    assert fooled.needed is None
    point = at_setting(cases, ends, OPTIONS)
    assert (point.setting, point.talk_over_rate) == (0.9, 2 / 5)


def test_the_field_reads_cut_offs_within_a_wait_and_the_wait_within_cut_offs() -> None:
    curve = fixed_curve(_cases([0.0] * 5), [0.9], waits_ms=[100, 300, 600, 1000, 1500])
    figures = field_figures(curve)
    assert figures["cut_offs_at_300_ms"] == 4 / 5  # W 300: pauses of 500 ms and more
    assert figures["cut_offs_at_600_ms"] == 3 / 5
    assert figures["wait_at_5_percent_ms"] == 1500  # 1,000 still cuts the 1.5 s pause: 20 %
    assert figures["wait_at_10_percent_ms"] == 1500
    never = field_figures(fixed_curve(_cases([0.0] * 5), [0.9], waits_ms=[100, 200]))
    assert never["wait_at_5_percent_ms"] is None


def test_the_target_bucket_is_half_a_second_to_a_second() -> None:
    assert [in_bucket(c) for c in _cases([0.0] * 5)] == [False, True, True, True, False]


def test_the_tradeoff_figures_have_both_rules_over_every_pause_and_the_target_bucket() -> None:
    figures = tradeoff_figures(_cases([0.1] * 5), [0.9], OPTIONS)
    assert set(figures) == {"all", "target_bucket"}
    assert set(figures["all"]) == {"fixed", "continuous", "at_setting", "field", "pauses"}
    assert set(figures["all"]["field"]) == {"fixed", "continuous"}
    assert figures["target_bucket"]["fixed"]["cases"] == 3
    without_model = tradeoff_figures(_cases([0.0] * 5), None, OPTIONS)
    assert set(without_model["all"]) == {"fixed", "field", "pauses"}


def test_the_offline_cases_decode_each_prefix_once_and_use_the_vad_silence(
    tmp_path: Path,
) -> None:
    rows = [json.loads(line) for line in (SPEECH / "manifest.jsonl").read_text().splitlines()]
    row = next(r for r in rows if r["id"] == "sb_spk2_snt4")
    row["file"] = str(SPEECH / row["file"])
    source = tmp_path / "manifest.jsonl"
    source.write_text(json.dumps(row) + "\n")
    out = tmp_path / "clips"
    made = make_paused_clips(source, SPEECH / "words.jsonl", out, pauses_s=(0.5, 1.0))
    from cadence.tooling.bench.turn_taking import read_turn_manifest

    clips = read_turn_manifest(out / "manifest.jsonl")
    decoded: list[int] = []

    def transcribe(pcm: np.ndarray) -> str:
        decoded.append(len(pcm))
        return "mend the coat before" if len(decoded) > 1 else "mend the coat before you go out"

    cases, complete, prefixes = offline_cases(clips, transcribe, lambda t, agent: len(t) / 100)
    inserted = [c for c in cases if c.inserted]
    own = [c for c in cases if not c.inserted]
    # The complete clip, each of the speaker's own pauses, and one prefix for both lengths.
    assert len(decoded) == 2 + len(own)
    paused = [r for r in made if r["kind"] == "paused"]
    assert decoded[-1] == round(float(paused[0]["pause_at_s"]) * 16000)
    assert [c.silence_ms for c in inserted] == [1000 * float(r["silence_s"]) for r in paused]
    assert [c.p for c in inserted] == [len("mend the coat before") / 100] * 2
    assert complete == [Heard("sb_spk2_snt4", "mend the coat before you go out", 0.31)]
    assert len(prefixes) == 1 + len(own)


# ---------------------------------------------------------------------------------- live


def _trace(clip_id: str, *, end: float, heard: float | None, **extra: object) -> TurnTrace:
    events = {AnchorEvent.USER_SPEECH_END: end}
    if heard is not None:
        events[AnchorEvent.AUDIO_OUT_FIRST] = heard - 5
        events[AnchorEvent.AUDIO_HEARD_FIRST] = heard
    annotations = {"clip_id": clip_id, "variant": "full", CALLER_MEASURED: True} | extra
    return TurnTrace(session_id=clip_id, turn=0, events=events, annotations=annotations)


def _clip(clip_id: str, kind: str = "complete", pause: float | None = None) -> TurnClip:
    manifest = ManifestClip(clip_id, Path(f"{clip_id}.wav"), "text")
    if kind == "complete":
        return TurnClip(manifest, clip_id, "complete")
    assert pause is not None
    return TurnClip(manifest, "src", "paused", 1.0, pause, "the prefix", pause)


def test_live_figures_count_talk_overs_by_pause_and_voice_to_voice_of_complete_turns() -> None:
    clips = [
        _clip("a"),
        _clip("b"),
        _clip("c"),
        _clip("p5", "paused", 0.5),
        _clip("p7", "paused", 0.7),
        _clip("p15", "paused", 1.5),
    ]
    traces = [
        _trace("a", end=10_000, heard=10_400),
        _trace("b", end=10_000, heard=10_800),
        _trace("c", end=10_000, heard=None),  # unanswered
        # Heard 1.2 s into the clip (clip start = end − speech end in clip = 7 s): in the pause.
        _trace("p5", end=10_000, heard=8_200),
        _trace("p5", end=10_000, heard=10_500),
        _trace("p7", end=10_000, heard=None, withdrawn=True),
        _trace("p7", end=10_000, heard=10_300),
        # Heard 0.5 s into the clip: before the inserted pause, at one of the clip's own.
        _trace("p15", end=10_000, heard=7_500),
        _trace("p15", end=10_000, heard=10_600),
    ]
    direct = live_figures(traces, clips, speech_end_ms=lambda clip, transport: 3000.0)["direct"]
    complete = direct["complete"]
    assert complete["clips"] == 3
    assert complete["outcomes"]["answered"] == 2
    assert complete["outcomes"]["unanswered"] == 1
    assert complete["clip_outcomes"] == {"answered": 2, "unanswered": 1}
    # 400 and 800 ms: the median half-way, p90 at rank 0.9 × 1 by linear interpolation.
    assert complete["voice_to_voice_ms"] == pytest.approx(
        {"count": 2, "p50": 600.0, "p90": 760.0, "max": 800.0}
    )
    paused = direct["paused"]
    by = {row["pause_s"]: row for row in paused["by_pause"]}
    assert [row["pause_s"] for row in paused["by_pause"]] == [0.3, 0.5, 0.7, 1.0, 1.5]
    assert by[0.3]["clips"] == 0
    assert by[0.3]["talk_over_rate"] is None
    assert (by[0.5]["talked_over"], by[0.5]["into_pause"]) == (1, 1)
    assert (by[0.7]["talked_over"], by[0.7]["withdrawn"], by[0.7]["answered"]) == (0, 1, 1)
    assert (by[1.5]["talked_over"], by[1.5]["into_pause"]) == (1, 0)
    bucket = paused["target_bucket"]
    assert (bucket["clips"], bucket["talked_over"], bucket["talk_over_rate"]) == (2, 1, 0.5)
    assert paused["all"]["talked_over"] == 2
    p5 = next(p for p in direct["paused_clips"] if p["clip_id"] == "p5")
    assert p5["heard_at_s"] == pytest.approx(1.2)


def test_an_utterance_talked_over_counts_so_even_when_it_was_answered_after() -> None:
    talked = _trace("x", end=1000, heard=500)
    answered = _trace("x", end=1000, heard=1300)
    assert utterance_outcome([talked, answered]) == "talked_over"
    assert utterance_outcome([answered]) == "answered"
    assert utterance_outcome([_trace("x", end=1000, heard=None)]) == "unanswered"
    assert utterance_outcome([_trace("x", end=1000, heard=1300, llm_error="boom")]) == "failed"


# ---------------------------------------------------------------------------------- text model


def test_reference_prefixes_are_cut_at_every_mid_sentence_boundary() -> None:
    assert reference_prefixes("When you hear the bell, come quickly.") == [
        ("When", True),
        ("When you", False),
        ("When you hear", False),
        ("When you hear the", True),
        ("When you hear the bell,", False),
        ("When you hear the bell, come", False),
    ]
    assert [p for p, _ in reference_prefixes("Stop. Now go")] == ["Stop. Now"]


def test_the_accuracy_counts_each_set_at_the_threshold() -> None:
    def score(text: str) -> float:
        return 0.9 if text.endswith((".", "out")) else 0.1

    result = text_model_accuracy(
        score,
        0.5,
        ["Go out.", "Go out.", "mend the coat"],
        [Heard("a", "mend the coat before you go out", None)],
        [Heard("a+p", "mend the coat.", None)],
    )
    assert result["reference_complete"]["count"] == 2  # each distinct reference once
    assert result["reference_complete"]["right"] == 1
    assert result["reference_complete"]["wrong"] == [{"text": "mend the coat", "p": 0.1}]
    assert result["reference_prefixes"]["count"] == 3  # "Go", "mend", "mend the"
    assert result["reference_prefixes"]["accuracy"] == 1.0
    assert result["reference_prefixes_clearly_unfinished"]["count"] == 1  # "mend the"
    assert result["whisper_complete"]["accuracy"] == 1.0
    assert result["whisper_prefixes"]["accuracy"] == 0.0


# ---------------------------------------------------------------------------------- sounds


def test_the_short_words_are_real_words_cut_at_their_timestamps() -> None:
    clips = read_manifest(SPEECH / "manifest.jsonl")
    sounds = real_short_words(clips, read_words(SPEECH / "words.jsonl"), 3)
    assert [s.name for s in sounds] == ['"so"', '"one"']
    # Read sentences hold no listener's "yeah": "so" and "one" say something, and should cut.
    assert all(s.kind == "words" and s.expected == "cut" for s in sounds)
    assert all(0.2 < len(s.pcm) / 16000 < 0.5 for s in sounds)
    noise, click = noise_sounds()
    assert len(noise.pcm) == 2400
    assert level_db(noise.pcm) == pytest.approx(-20, abs=1.0)
    assert len(click.pcm) == 160


def test_false_interruptions_are_soft_sounds_that_cut_the_reply() -> None:
    results: list[dict[str, Any]] = [
        {"kind": "backchannel", "result": "cut", "correct": False},
        {"kind": "noise", "result": "resumed", "correct": True},
        {"kind": "noise", "result": "over_before", "correct": None},
        {"kind": "words", "result": "cut", "correct": True},
    ]
    assert summarize(results) == {
        "cases": 4,
        "judged": 3,
        "false_interruptions": 1,
        "soft_sounds": 2,
        "resumed": 1,
        "words_cut": 1,
        "words": 1,
    }


# ---------------------------------------------------------------------------------- report


def test_the_report_has_its_files_and_sections(tmp_path: Path) -> None:
    clips = [_clip("a"), _clip("p5", "paused", 0.5)]
    traces = [_trace("a", end=10_000, heard=10_400), _trace("p5", end=10_000, heard=8_200)]
    live = live_figures(traces, clips, speech_end_ms=lambda clip, transport: 3000.0)
    live["direct"]["false_interruptions"] = [
        {"name": '"so"', "kind": "backchannel", "sound_ms": 300.0, "result": "cut",
         "heard_text": "Sure."},
    ]  # fmt: skip
    figures = tradeoff_figures(_cases([0.1] * 5), [0.9], OPTIONS)
    report = {
        "schema": "cadence.turn_taking/1",
        "manifest": "m.jsonl",
        "end_of_turn": OPTIONS.model_dump(mode="json"),
        "live": live,
        "tradeoff": {"16 kHz": figures},
        "text_model": {
            "error": None,
            "recorded": {"test": {"complete": 0.93}},
            "accuracy": {"16 kHz": text_model_accuracy(lambda t: 0.9, 0.5, ["Go out."], [], [])},
        },
    }
    write_turn_taking(report, tmp_path)
    assert json.loads((tmp_path / JSON_FILE).read_text()) == report
    markdown = (tmp_path / MARKDOWN_FILE).read_text()
    for text in ("## direct", "**0.5–1 s**", "False interruptions", "The trade-off",
                 "fixed wait: W = 1,500 ms", "continuous wait: confidence",
                 "cut-offs at a 300 ms wait",
                 "outside its training domains", "reference_complete"):  # fmt: skip
        assert text in markdown, text
    assert (tmp_path / PLOT_FILE).read_bytes()[:4] == b"\x89PNG"


# ---------------------------------------------------------------------------------- real


def test_one_paused_clip_through_the_real_pipeline(tmp_path: Path) -> None:
    rows = [json.loads(line) for line in (SPEECH / "manifest.jsonl").read_text().splitlines()]
    row = next(r for r in rows if r["id"] == "sb_spk2_snt4")
    row["file"] = str(SPEECH / row["file"])
    source = tmp_path / "source.jsonl"
    source.write_text(json.dumps(row) + "\n")
    clips = tmp_path / "clips"
    make_paused_clips(source, SPEECH / "words.jsonl", clips, pauses_s=(0.7,))
    manifest = clips / "manifest.jsonl"
    lines = manifest.read_text().splitlines()
    manifest.write_text(lines[1] + "\n")  # the paused clip alone
    out = tmp_path / "out"
    exe = Path(sys.executable).with_name("cadence")
    result = subprocess.run(
        [str(exe), "bench-turns", "-m", str(manifest), "-o", str(out), "--no-interruptions",
         "--no-offline"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads((out / JSON_FILE).read_text())
    paused = report["live"]["direct"]["paused"]
    assert paused["all"]["clips"] == 1
    row_07 = next(r for r in paused["by_pause"] if r["pause_s"] == 0.7)
    assert row_07["clips"] == 1
    # The truth: the caller paused mid-sentence ("mend the coat before … you go out") and went
    # on, so the reply belongs after the end of the sentence, not in the pause (as in
    # test_turn_taking.py). And the budget report is there.
    [paused_clip] = report["live"]["direct"]["paused_clips"]
    assert paused_clip["outcome"] == "answered", paused_clip
    assert (out / "summary.json").is_file()
    assert (out / MARKDOWN_FILE).is_file()
