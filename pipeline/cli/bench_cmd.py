"""``cadence bench-voice``: measure VAD, STT and TTS on real speech."""

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
from pipeline.bench.voice_bench import run_voice_bench, write_report
from pipeline.cli._config_option import CONFIG_OPTION, load_config_or_exit


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
