"""``cadence bench`` (whole turns, with ablations) and ``cadence bench-voice`` (VAD, STT and
TTS alone) on real speech."""

from __future__ import annotations

import asyncio
import os
import platform
import shlex
import sys
from pathlib import Path

import typer
from rich.console import Console

from pipeline.bench.manifest import read_manifest
from pipeline.bench.turn_bench import ABLATIONS, run_bench, variants, write_traces
from pipeline.bench.voice_bench import run_voice_bench, write_report
from pipeline.cli._config_option import CONFIG_OPTION, load_config_or_exit
from pipeline.report import build_report


def machine_description() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


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
    write_report(report, out)
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
    clips = read_manifest(manifest)[:limit]
    Console(stderr=True).print(
        f"{len(clips)} clips × {len(chosen)} variants, {concurrency} at a time, in real time",
        highlight=False,
    )
    traces = asyncio.run(run_bench(clips, settings, concurrency=concurrency, ablate=ablations))
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
