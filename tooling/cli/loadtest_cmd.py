"""``cadence loadtest``: many calls at once for minutes, through the real telephony endpoint;
latency against load, refusals, errors, memory and open files over time, tasks left behind.
``cadence bench-workers``: ``cadence serve --workers N`` from the callers' side — 1 against 2
workers, a worker killed mid-call, a drain under load.

Like ``serve``, it reaches up to ``web/`` (the server and the Twilio emulator) only when it
runs.
"""

from __future__ import annotations

import asyncio
import shlex
import sys
from pathlib import Path

import typer
from rich.console import Console

from cadence.cli.config_option import CONFIG_OPTION, load_config_or_exit
from cadence.report.run_info import machine_description
from cadence.tooling.bench.load_report import write_load_report
from cadence.tooling.bench.manifest import read_manifest

TRANSPORTS = ("twilio", "webrtc")


def loadtest(
    manifest: Path = typer.Option(
        ..., "--manifest", "-m", help="Clips (JSON lines: id, file, text; `file_8k` preferred)."
    ),
    out: Path = typer.Option(..., "--out", "-o", help="Report directory (resumes what it holds)."),
    transport: str = typer.Option(
        "twilio",
        "--transport",
        help="twilio (the /twilio endpoint, 8 kHz μ-law) or webrtc (the browser demo's call, "
        "Opus over aiortc).",
    ),
    sessions: str = typer.Option(
        "1,2,4,8,16", "--sessions", help="Comma-separated load levels: concurrent callers."
    ),
    minutes: float = typer.Option(2.0, "--minutes", min=0.05, help="Minutes per level."),
    telephone: bool = typer.Option(
        False, "--telephone", help="Only the clips with an 8 kHz telephone file (`file_8k`)."
    ),
    config: Path | None = CONFIG_OPTION,
) -> None:
    """Calls at every load level through the real endpoint; writes load.md and report.md."""
    from cadence.tooling.bench.loadtest import run_levels

    if transport not in TRANSPORTS:
        raise typer.BadParameter(f"choose from {', '.join(TRANSPORTS)}", param_hint="--transport")
    levels = _numbers(sessions, "--sessions")
    settings = load_config_or_exit(config)
    clips = [c for c in read_manifest(manifest) if c.telephone_path or not telephone]
    Console(stderr=True).print(
        f"levels {levels}, {minutes:g} min each, {len(clips)} clips, "
        f"server.max_sessions {settings.server.max_sessions}",
        highlight=False,
    )
    traces, results, leaked = asyncio.run(
        run_levels(clips, settings, transport=transport, levels=levels, minutes=minutes, out=out)
    )
    text = write_load_report(
        traces,
        results,
        leaked,
        out,
        budget=settings.budget,
        config=settings.model_dump(mode="json"),
        machine=machine_description(),
        command=shlex.join(["cadence", *sys.argv[1:]]),
    )
    Console().print(text, markup=False, highlight=False)


def bench_workers(
    manifest: Path = typer.Option(
        ..., "--manifest", "-m", help="Clips (JSON lines: id, file, text; `file_8k` preferred)."
    ),
    out: Path = typer.Option(..., "--out", "-o", help="Report directory (resumes what it holds)."),
    workers: str = typer.Option("1,2", "--workers", help="Comma-separated worker counts."),
    sessions: str = typer.Option("4,8", "--sessions", help="Comma-separated callers at once."),
    minutes: float = typer.Option(1.5, "--minutes", min=0.2, help="Minutes per run."),
    config: Path | None = CONFIG_OPTION,
) -> None:
    """1 against 2 workers at each load, a worker killed mid-call and a drain under load, each
    on a fresh `cadence serve --workers N`; every call judged by what its caller heard."""
    from cadence.report.files import write_report
    from cadence.tooling.bench.workers import bench_workers as run_bench
    from cadence.tooling.bench.workers import render_markdown

    counts = _numbers(workers, "--workers")
    levels = _numbers(sessions, "--sessions")
    settings = load_config_or_exit(config)
    clips = [c for c in read_manifest(manifest) if c.telephone_path]
    report = run_bench(
        clips, workers=counts, levels=levels, minutes=minutes, config=settings, out=out
    )
    command = shlex.join(["cadence", *sys.argv[1:]])
    text = render_markdown(report, command, machine_description())
    write_report(out, {"workers.md": text})
    Console().print(text, markup=False, highlight=False)


def _numbers(text: str, option: str) -> list[int]:
    try:
        numbers = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter("comma-separated numbers", param_hint=option) from None
    if not numbers or min(numbers) < 1:
        raise typer.BadParameter("at least one, each ≥ 1", param_hint=option)
    return numbers
