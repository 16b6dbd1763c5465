"""``cadence make-paused-clips`` (read speech with a silence inserted mid-sentence) and
``cadence make-turn-clips`` (callers' turns in the project's own voices): the clips of
``cadence bench-turns``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import typer
from rich.console import Console

from cadence.cli.config_option import CONFIG_OPTION, load_config_or_exit
from cadence.pipeline.config import TTSConfig
from cadence.pipeline.model_loading import load_tts
from cadence.tooling.bench.manifest import read_manifest
from cadence.tooling.bench.pause_points import align_words, write_words
from cadence.tooling.bench.paused_clips import PAUSES_S
from cadence.tooling.bench.paused_clips import make_paused_clips as write_paused_clips
from cadence.tooling.bench.voice_clips import CallerTurn
from cadence.tooling.bench.voice_clips import make_turn_clips as write_turn_clips
from cadence.tooling.training.end_of_turn_examples import user_turns
from cadence.voice.audio import PCM16
from cadence.voice.tts.synthesizer import EMBEDDED_VOICES, Synthesizer


def make_paused_clips(
    manifest: Path = typer.Option(
        ..., "--manifest", "-m", help="Clips (JSON lines: id, file, text, file_8k)."
    ),
    words: Path = typer.Option(
        ..., "--words", help="Word timestamps (JSON lines: id, words); written by --align."
    ),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Directory for the clips and their manifest.jsonl."
    ),
    pauses: str = typer.Option(
        ",".join(map(str, PAUSES_S)), "--pauses", help="Pause lengths in seconds."
    ),
    align: bool = typer.Option(
        False, "--align", help="(Re)write --words first, with faster-whisper word timestamps."
    ),
    config: Path | None = CONFIG_OPTION,
) -> None:
    """The turn-taking clips: each clip complete, and with a silence inserted mid-sentence."""
    settings = load_config_or_exit(config)
    err = Console(stderr=True)
    try:
        lengths = [float(p) for p in pauses.split(",") if p.strip()]
    except ValueError as exc:
        raise typer.BadParameter(f"not numbers: {pauses!r}", param_hint="--pauses") from exc
    if not lengths or min(lengths) <= 0:
        raise typer.BadParameter("give one or more positive lengths", param_hint="--pauses")
    if align:
        rows = align_words(read_manifest(manifest), settings.models.stt)
        write_words(rows, words)
        err.print(f"wrote word timestamps of {len(rows)} clips to {words}", highlight=False)
    if out is None:
        if not align:
            raise typer.BadParameter("give --out (or --align alone)", param_hint="--out")
        return
    made = write_paused_clips(manifest, words, out, pauses_s=lengths, vad=settings.vad)
    paused = [row for row in made if row["kind"] == "paused"]
    sources = {row["source_id"] for row in paused}
    err.print(
        f"{len(made) - len(paused)} complete clips, {len(paused)} paused ones "
        f"({len(sources)} sources × {len(lengths)} pauses) in {out}",
        highlight=False,
    )


def _speaker(synthesizer: Synthesizer) -> Callable[[str], tuple[PCM16, int]]:
    def synthesize(text: str) -> tuple[PCM16, int]:
        chunks = list(synthesizer.synthesize_blocking(text, varied=False))
        return np.concatenate(chunks), synthesizer.sample_rate

    return synthesize


def make_turn_clips(
    corpus: Path = typer.Option(
        ..., "--corpus", help="A dialogue corpus (JSONL) the words come from."
    ),
    out: Path = typer.Option(..., "--out", "-o", help="Directory for the clips and manifest."),
    per_style: int = typer.Option(6, "--per-style", help="Clips of each style, per voice."),
    voices: str = typer.Option(
        ",".join(sorted(EMBEDDED_VOICES)), "--voices", help="Comma-separated TTS voices."
    ),
    seed: int = typer.Option(0, "--seed"),
    max_dialogues: int | None = typer.Option(
        2000, "--max-dialogues", help="Read the first N dialogues of the corpus."
    ),
    config: Path | None = CONFIG_OPTION,
) -> None:
    """Turn-taking clips in the project's own voices: requests, two sentences, numbers,
    spelled names, addresses, hesitations, clauses and commands, with their pauses."""
    settings = load_config_or_exit(config)
    chosen = [v.strip() for v in voices.split(",") if v.strip()]
    speakers = {
        voice.removeprefix("embedded:"): _speaker(
            load_tts(TTSConfig(voice=voice), settings.threads)
        )
        for voice in chosen
    }
    turns = [CallerTurn(t.text, t.agent) for t in user_turns(corpus, max_dialogues)]
    made = write_turn_clips(turns, corpus.stem, out, speakers, per_style=per_style, seed=seed)
    Console(stderr=True).print(f"{made} clips in {out}", highlight=False)
