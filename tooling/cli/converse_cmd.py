"""``cadence converse``: play clips as the caller's side of one conversation."""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer

from cadence.cli.config_option import CONFIG_OPTION, load_config_or_exit
from cadence.pipeline.config import TracingConfig
from cadence.pipeline.session import SAMPLE_RATE
from cadence.report.files import write_report
from cadence.tooling.converse import converse as run_conversation
from cadence.voice.audio.wavfile import read_audio, write_wav


def converse(
    clips: list[Path] = typer.Option(..., "--in", help="The caller's utterances, in order."),
    out: Path = typer.Option(..., "--out", "-o", help="Directory for audio, transcript, traces."),
    rate: int = typer.Option(16000, "--rate", help="Sample rate of the agent's audio files."),
    config: Path | None = CONFIG_OPTION,
) -> None:
    """Speak the clips at real-time pace, silence between turns; record the agent.

    Writes agent_NN.wav (what the agent said, per reply), transcript.json and traces.jsonl.
    """
    settings = load_config_or_exit(config)
    out.mkdir(parents=True, exist_ok=True)
    traces = TracingConfig(jsonl_path=str(out / "traces.jsonl"))
    utterances = [read_audio(clip, SAMPLE_RATE) for clip in clips]
    result = asyncio.run(
        run_conversation(
            utterances, settings.model_copy(update={"tracing": traces}), output_sample_rate=rate
        )
    )
    for n, reply_index in enumerate(result.output.reply_indices()):
        write_wav(out / f"agent_{n:02d}.wav", result.output.audio(reply_index), rate)
    transcript = [{"speaker": t.speaker, "text": t.text} for t in result.history]
    write_report(out, {"transcript.json": transcript})
    for turn in transcript:
        typer.echo(f"{turn['speaker']:>5}: {turn['text']}")
