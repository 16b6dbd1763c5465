"""``cadence bench`` (whole turns, with ablations) and ``cadence bench-voice`` (VAD, STT and
TTS alone) on real speech."""

from __future__ import annotations

import asyncio
import os
import platform
import shlex
import sys
from contextlib import AsyncExitStack
from pathlib import Path

import typer
from rich.console import Console

from cadence.pipeline.config import CadenceConfig
from cadence.pipeline.tracing import TurnTrace
from cadence.tooling.bench.manifest import ManifestClip, read_manifest
from cadence.tooling.bench.turn_bench import (
    ABLATIONS,
    TurnRunner,
    run_bench,
    run_turn,
    variants,
    write_traces,
)
from cadence.tooling.bench.voice_bench import run_voice_bench, write_report
from cadence.tooling.cli.config_option import CONFIG_OPTION, load_config_or_exit
from cadence.tooling.report import build_report

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
