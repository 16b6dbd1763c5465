"""``cadence make-turn-clips``: the clips in the project's own voices — their plans drawn from a
real dialogue corpus, and the pauses put in them found where they were put by the engine's own
VAD (``engine_pauses``, which the field's measure of ``bench-turns`` counts on)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cadence.tooling.bench.pause_points import engine_pauses
from cadence.tooling.bench.voice_clips import STYLES, CallerTurn, make_turn_clips, plans
from cadence.tooling.training.end_of_turn_examples import user_turns
from cadence.voice.audio import PCM16
from cadence.voice.audio.wavfile import read_audio
from cadence.voice.tts import load_synthesizer

CORPUS = [
    CallerTurn(turn.text, turn.agent)
    for turn in user_turns(
        Path(__file__).parent / "data" / "dialogue" / "sgd_tools_dev_sample.jsonl"
    )
]


def test_the_plans_take_their_words_from_the_corpus() -> None:
    drawn = plans(CORPUS, per_style=2, seed=0)
    said = {" ".join(t.text.split()) for t in CORPUS}
    agents = " ".join(t.agent or "" for t in CORPUS)
    assert {p.style for p in drawn} >= {"request", "two_sentences", "numbers", "command"}
    for plan in drawn:
        assert len(plan.pauses_s) == len(plan.chunks) - 1
        assert all(0.1 <= s <= 1.5 for s in plan.pauses_s)
        if plan.style in ("request", "two_sentences", "command", "clauses"):
            assert plan.text.replace(", um,", "") in said or plan.text in said, plan
        if plan.style == "hesitation":
            assert plan.text.replace(", um,", "") in said, plan
        if plan.style == "numbers":  # a phone number the agent gave, read back in groups
            digits = "".join(c for c in plan.text if c.isdigit())
            assert f"{digits[:3]}-{digits[3:6]}-{digits[6:]}" in agents
    assert plans(CORPUS, per_style=2, seed=0) == drawn  # seeded
    assert plans(CORPUS, per_style=2, seed=1) != drawn
    assert set(STYLES) >= {p.style for p in drawn}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("voices")
    synthesizer = load_synthesizer("embedded:en_US-joe-medium")

    def speak(text: str) -> tuple[PCM16, int]:
        pcm = np.concatenate(list(synthesizer.synthesize_blocking(text, varied=False)))
        return pcm, synthesizer.sample_rate

    make_turn_clips(CORPUS, "sample", out, {"joe": speak}, per_style=1, seed=0)
    return out


def test_the_engine_hears_each_pause_where_it_was_put(made: Path) -> None:
    rows = [json.loads(line) for line in (made / "manifest.jsonl").read_text().splitlines()]
    assert rows
    assert all(row["kind"] == "complete" and row["voice"] == "joe" for row in rows)
    checked = 0
    for row in rows:
        pcm = read_audio(made / row["file"], 16000)
        found, end_ms = engine_pauses(pcm, 16000)
        assert end_ms is not None
        lengths = [(stop - start) / 1000 for start, stop in found]
        for put in (s for s in row["pauses_s"] if s >= 0.3):
            # Each pause put in is heard as one, within the VAD's frames and the voice's own
            # breath at the chunk's edges (the pause plus up to ~0.15 s).
            assert any(put - 0.06 <= got <= put + 0.2 for got in lengths), (row["text"], lengths)
            checked += 1
        assert len(pcm) / 16 - end_ms >= 1000  # the turn ends before the clip's quiet tail
    assert checked >= 4
