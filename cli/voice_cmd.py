"""``cadence transcribe`` and ``cadence say``: the ears and the mouth, one file at a time."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import typer
from rich.console import Console

from cadence.cli.config_option import CONFIG_OPTION, load_config_or_exit
from cadence.pipeline.model_loading import load_stt, load_tts
from cadence.voice.audio import resample
from cadence.voice.audio.wavfile import AudioFileError, read_audio, write_wav
from cadence.voice.model_errors import ModelUnavailableError
from cadence.voice.stt.transcriber import SAMPLE_RATE

EXIT_BAD_INPUT = 3
"""Exit status when an input file or a configured model cannot be used."""

T = TypeVar("T")


def _or_exit(load: Callable[[], T], err: Console) -> T:
    """Load a model; if the configuration names one that is not there, say so and exit."""
    try:
        return load()
    except ModelUnavailableError as exc:
        err.print(f"[red]error[/] {exc}", highlight=False)
        raise typer.Exit(EXIT_BAD_INPUT) from exc


def transcribe(
    files: list[Path] = typer.Argument(
        ..., help="Audio files (any WAV, FLAC, OGG).", show_default=False
    ),
    config: Path | None = CONFIG_OPTION,
) -> None:
    """Print each file's transcript and its decode time."""
    err = Console(stderr=True, soft_wrap=True)
    settings = load_config_or_exit(config)
    transcriber = _or_exit(lambda: load_stt(settings.models.stt, settings.threads), err)
    failed = False
    for file in files:
        try:
            audio = read_audio(file, SAMPLE_RATE)
        except AudioFileError as exc:
            err.print(f"[red]error[/] {exc}", highlight=False, markup=True)
            failed = True
            continue
        result = transcriber.transcribe_blocking(audio)
        # Tab-separated, so the output is easy to cut and grep.
        seconds = len(audio) / SAMPLE_RATE
        typer.echo(f"{file}\t{seconds:.2f} s audio\t{result.decode_ms:.0f} ms\t{result.text}")
    if failed:
        raise typer.Exit(EXIT_BAD_INPUT)


def say(
    text: str = typer.Argument(..., help="What to say."),
    out: Path = typer.Option(..., "--out", "-o", help="WAV file to write."),
    rate: int | None = typer.Option(
        None, "--rate", help="Sample rate; the voice's own if omitted."
    ),
    config: Path | None = CONFIG_OPTION,
) -> None:
    """Synthesize TEXT with the configured voice (`models.tts.voice`) into a WAV file."""
    err = Console(stderr=True, soft_wrap=True)
    if not text.strip():
        err.print("[red]error[/] nothing to say: TEXT is empty")
        raise typer.Exit(EXIT_BAD_INPUT)
    settings = load_config_or_exit(config)
    synthesizer = _or_exit(lambda: load_tts(settings.models.tts, settings.threads), err)
    chunks = list(synthesizer.synthesize_blocking(text))
    audio = np.concatenate(chunks) if chunks else np.zeros(0, np.int16)
    out_rate = rate or synthesizer.sample_rate
    write_wav(out, resample(audio, synthesizer.sample_rate, out_rate), out_rate)
    Console().print(
        f"{out}\t{len(audio) / synthesizer.sample_rate:.2f} s at {out_rate} Hz", highlight=False
    )
