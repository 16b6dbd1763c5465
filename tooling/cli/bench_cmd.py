"""``cadence bench`` (whole turns, with ablations), ``cadence bench-voice`` (VAD, STT and
TTS alone), ``cadence bench-turns`` (turn-taking: talk-overs, false interruptions, the wait)
on real speech (the clips of the last: ``clips_cmd``)."""

from __future__ import annotations

import asyncio
import shlex
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import numpy as np
import typer
from rich.console import Console

from cadence.cli.config_option import CONFIG_OPTION, load_config_or_exit
from cadence.pipeline.config import BudgetConfig, CadenceConfig
from cadence.pipeline.model_loading import load_tts
from cadence.pipeline.tracing import TurnTrace
from cadence.report import build_report
from cadence.report.run_info import machine_description
from cadence.tooling.bench.interruptions import (
    REAL_SHORT_WORDS,
    noise_sounds,
    real_short_words,
    run_interruptions,
    synthesized_backchannels,
    words_sound,
)
from cadence.tooling.bench.interruptions import summarize as summarize_interruptions
from cadence.tooling.bench.manifest import ManifestClip, read_manifest
from cadence.tooling.bench.pause_points import WORDS_FILE, read_words
from cadence.tooling.bench.tools import run_tools_bench
from cadence.tooling.bench.turn_bench import (
    ABLATIONS,
    TurnRunner,
    run_bench,
    run_turn,
    variants,
    write_traces,
)
from cadence.tooling.bench.turn_taking import (
    MARKDOWN_FILE,
    SCHEMA,
    live_figures,
    read_turn_manifest,
)
from cadence.tooling.bench.turn_taking_offline import (
    end_of_turn_scorers,
    load_text_model,
    offline_report,
    recorded_metrics,
)
from cadence.tooling.bench.turn_taking_report import write_turn_taking
from cadence.tooling.bench.voice_bench import run_voice_bench, write_voice_bench
from cadence.voice.audio import PCM16
from cadence.voice.audio.wavfile import read_audio

TRANSPORTS = ("direct", "twilio")


async def _run(
    clips: list[ManifestClip],
    config: CadenceConfig,
    *,
    concurrency: int,
    ablate: list[str],
    transports: list[str],
) -> list[TurnTrace]:
    async with AsyncExitStack() as stack:
        runners: dict[str, TurnRunner] = {}
        for name in transports:
            if name == "direct":
                runners[name] = run_turn
            else:
                # The composition root reaches up to web/ only when asked (see serve_cmd).
                from cadence.tooling.bench.runners import TwilioTurnRunner

                runners[name] = await stack.enter_async_context(TwilioTurnRunner())
        return await run_bench(
            clips, config, concurrency=concurrency, ablate=ablate, transports=runners
        )


def bench_voice(
    manifest: Path = typer.Option(
        ..., "--manifest", "-m", help="Clips (JSON lines: id, file, text)."
    ),
    replies: Path = typer.Option(..., "--replies", help="Agent replies for TTS, one per line."),
    out: Path = typer.Option(..., "--out", "-o", help="Directory for voice_bench.json and .md."),
    partials_ms: int | None = typer.Option(
        None, "--partials-ms", help="Also run with live captions at this interval."
    ),
    limit: int | None = typer.Option(None, "--limit", help="Only the first N clips."),
    config: Path | None = CONFIG_OPTION,
) -> None:
    """Stream each clip in real time through VAD → STT, and each reply through TTS."""
    settings = load_config_or_exit(config)
    clips = read_manifest(manifest)[:limit]
    texts = [line.strip() for line in replies.read_text().splitlines() if line.strip()]
    command = shlex.join(["cadence", *sys.argv[1:]])
    report = asyncio.run(
        run_voice_bench(
            clips, texts, settings, partials_ms=partials_ms, machine=machine_description(),
            command=command,
        )
    )  # fmt: skip
    write_voice_bench(report, out)
    Console().print((out / "voice_bench.md").read_text(), markup=False, highlight=False)


def bench(
    manifest: Path = typer.Option(
        ..., "--manifest", "-m", help="Clips (JSON lines: id, file, text)."
    ),
    out: Path = typer.Option(..., "--out", "-o", help="Report directory."),
    concurrency: int = typer.Option(1, "--concurrency", "-n", min=1, help="Sessions at once."),
    ablate: str = typer.Option(
        "", "--ablate", help=f"Comma-separated variants beside the full one: {','.join(ABLATIONS)}."
    ),
    transport: str = typer.Option(
        "direct",
        "--transport",
        help="Comma-separated: direct (in process, 16 kHz), twilio (the real /twilio endpoint, "
        "8 kHz μ-law, played by a Twilio emulator; clips' `file_8k` where they have one).",
    ),
    telephone: bool = typer.Option(
        False, "--telephone", help="Only the clips with an 8 kHz telephone file (`file_8k`)."
    ),
    limit: int | None = typer.Option(None, "--limit", help="Only the first N clips."),
    config: Path | None = CONFIG_OPTION,
) -> None:
    """Voice-to-voice turns on real clips, streamed in real time; traces and a budget report."""
    settings = load_config_or_exit(config)
    ablations = [name.strip() for name in ablate.split(",") if name.strip()]
    try:
        chosen = variants(settings, ablations)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--ablate") from exc
    transports = [name.strip() for name in transport.split(",") if name.strip()]
    if not transports or set(transports) - set(TRANSPORTS):
        raise typer.BadParameter(
            f"choose from {', '.join(TRANSPORTS)}, got {transport!r}", param_hint="--transport"
        )
    clips = [c for c in read_manifest(manifest) if c.telephone_path or not telephone][:limit]
    Console(stderr=True).print(
        f"{len(clips)} clips × {len(chosen)} variants × {len(transports)} transports, "
        f"{concurrency} at a time, in real time",
        highlight=False,
    )
    traces = asyncio.run(
        _run(clips, settings, concurrency=concurrency, ablate=ablations, transports=transports)
    )
    write_traces(traces, out / "traces.jsonl")
    build_report(
        traces,
        out,
        budget=settings.budget,
        config=settings.model_dump(mode="json"),
        machine=machine_description(),
        command=shlex.join(["cadence", *sys.argv[1:]]),
    )
    Console().print((out / "report.md").read_text(), markup=False, highlight=False)


def bench_turns(
    manifest: Path = typer.Option(
        ..., "--manifest", "-m", help="Clips of `cadence make-paused-clips` (its manifest.jsonl)."
    ),
    out: Path = typer.Option(..., "--out", "-o", help="Report directory."),
    transport: str = typer.Option(
        "direct", "--transport", help="Comma-separated: direct, twilio (as for `cadence bench`)."
    ),
    limit: int | None = typer.Option(None, "--limit", help="Only the first N clips."),
    words: Path | None = typer.Option(
        None, "--words", help="Word timestamps for the backchannels; words.jsonl beside -m."
    ),
    question: str | None = typer.Option(
        None,
        "--question",
        help="The clip whose reply the sounds interrupt (the shortest of 5+ words).",
    ),
    live: bool = typer.Option(True, "--live/--no-live", help="Play the clips in real time."),
    interruptions: bool = typer.Option(
        True, "--interruptions/--no-interruptions", help="Run the false-interruption cases."
    ),
    offline: bool = typer.Option(
        True, "--offline/--no-offline", help="The trade-off curve and the text model's accuracy."
    ),
    config: Path | None = CONFIG_OPTION,
) -> None:
    """Turn-taking on real speech: talk-overs into mid-sentence pauses, voice-to-voice of
    complete turns, false interruptions, and the talk-over/wait trade-off."""
    settings = load_config_or_exit(config)
    transports = _transports(transport)
    err = Console(stderr=True)
    try:
        every = read_turn_manifest(manifest)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--manifest") from exc
    clips = every[:limit]
    command = shlex.join(["cadence", *sys.argv[1:]])
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "manifest": str(manifest),
        "clips": len(clips),
        "transports": transports,
        "end_of_turn": settings.turn.end_of_turn.model_dump(mode="json"),
        "machine": machine_description(),
        "command": command,
        "live": {},
    }
    if live:
        paused = sum(c.kind == "paused" for c in clips)
        err.print(
            f"{len(clips) - paused} complete and {paused} paused clips × "
            f"{len(transports)} transports, in real time",
            highlight=False,
        )
        traces = asyncio.run(
            _run([c.clip for c in clips], settings, concurrency=1, ablate=[], transports=transports)
        )
        write_traces(traces, out / "traces.jsonl")
        build_report(
            traces, out, budget=settings.budget, config=settings.model_dump(mode="json"),
            machine=machine_description(), command=command,
        )  # fmt: skip
        report["live"] = live_figures(traces, clips)
    if interruptions:
        complete = [c.clip for c in every if c.kind == "complete"]
        # By default the shortest sentence of five words or more asks, the next one interrupts.
        by_length = (
            sorted(
                (c for c in complete if len(c.text.split()) >= 5),
                key=lambda c: len(read_audio(c.path, 8000)),
            )
            or complete
        )
        chosen = [c for c in by_length if question is None or c.id == question]
        if not chosen:
            raise typer.BadParameter(f"no complete clip {question!r}", param_hint="--question")
        timestamps_path = words or manifest.parent / WORDS_FILE
        timestamps = read_words(timestamps_path) if timestamps_path.is_file() else {}
        synthesizer = load_tts(settings.models.tts, settings.threads)

        def synthesize(text: str) -> tuple[PCM16, int]:
            chunks = list(synthesizer.synthesize_blocking(text))
            return np.concatenate(chunks), synthesizer.sample_rate

        other = next((c for c in by_length if c.text != chosen[0].text), chosen[0])
        sounds = [
            *real_short_words(complete, timestamps, REAL_SHORT_WORDS),
            *synthesized_backchannels(synthesize),
            *noise_sounds(),
            words_sound(other),
        ]
        err.print(f"{len(sounds)} sounds over the reply to {chosen[0].id}", highlight=False)
        results = asyncio.run(run_interruptions(chosen[0], sounds, settings))
        section = report["live"].setdefault("direct", {})
        section["false_interruptions"] = results
        section["false_interruptions_summary"] = summarize_interruptions(results)
        section["question"] = chosen[0].id
    if offline:
        scorers, errors = end_of_turn_scorers(settings)
        report["end_of_turn_models"] = {
            name: {
                "error": errors.get(name),
                "threshold": scorers[name].threshold if name in scorers else None,
                "accuracy": {},
            }
            for name in ("lm", "text")
        }
        text_model, _ = load_text_model()
        report["end_of_turn_models"]["text"]["recorded"] = recorded_metrics(text_model)
        report["tradeoff"] = {}
        paths = [("16 kHz", False)] + (
            [("8 kHz phone line", True)] if "twilio" in transports else []
        )
        for name, telephone in paths:
            err.print(f"offline: whisper and the end-of-turn models on {name}", highlight=False)
            by_model = offline_report(clips, settings, telephone=telephone, scorers=scorers)
            for model, (figures, accuracy) in by_model.items():
                report["tradeoff"][f"{name}, {model} model"] = figures
                if accuracy is not None:
                    report["end_of_turn_models"][model]["accuracy"][name] = accuracy
    write_turn_taking(report, out)
    Console().print((out / MARKDOWN_FILE).read_text(), markup=False, highlight=False)


def _transports(transport: str) -> list[str]:
    transports = [name.strip() for name in transport.split(",") if name.strip()]
    if not transports or set(transports) - set(TRANSPORTS):
        raise typer.BadParameter(
            f"choose from {', '.join(TRANSPORTS)}, got {transport!r}", param_hint="--transport"
        )
    return transports


def bench_tools(
    manifest: Path = typer.Option(..., "--manifest", "-m", help="Clips the caller says."),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Directory for the traces and their report."
    ),
    turns: int = typer.Option(10, "--turns", help="Calls whose model calls an instant tool."),
    slow_turns: int = typer.Option(3, "--slow-turns", help="Calls with the slow tool."),
    slow_tool_ms: float = typer.Option(2000.0, "--slow-tool-ms", help="The slow tool's time."),
) -> None:
    """What tool calls cost a caller: Cadence's time per tool round, and the filler and
    silences of a slow tool (real speech, the openai backend against the fake service)."""
    clips = read_manifest(manifest)
    result = asyncio.run(run_tools_bench(clips, turns, slow_turns, slow_tool_ms))
    typer.echo("$ " + shlex.join(["cadence", *sys.argv[1:]]))
    for line in result.lines(slow_tool_ms):
        typer.echo(line)
    if out is not None:
        write_traces(result.traces, out / "traces.jsonl")
        build_report(
            result.traces,
            out,
            budget=BudgetConfig(),
            config=None,
            machine=machine_description(),
            command=shlex.join(["cadence", *sys.argv[1:]]),
        )
