"""``cadence report``: rebuild a latency report from any turn traces (a bench's
``traces.jsonl``, a server's session log)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from cadence.cli.config_option import load_config_or_exit
from cadence.pipeline.config import BudgetConfig
from cadence.pipeline.tracing import read_traces
from cadence.report import REPORT_FILE, build_report, read_run_info
from cadence.report.run_info import machine_description

EXIT_NO_TRACES = 1
"""Exit status when the traces are missing, empty or not Cadence turn traces."""


def report(
    traces: Path = typer.Argument(
        ...,
        help="Turn traces (JSON lines of `cadence.turn/1`). A run.json beside them (a bench "
        "writes one) supplies the machine, command, configuration and budget of the run.",
    ),
    out: Path = typer.Option(
        ..., "--out", "-o", help="Directory for summary.json, report.md and the plots."
    ),
    config: Path | None = typer.Option(
        None,
        "--config",
        "-c",
        help="YAML configuration whose budget to report against, instead of run.json's "
        "(built-in defaults when neither is there).",
    ),
) -> None:
    """Rebuild summary.json, report.md and the plots from turn traces."""
    try:
        run = read_run_info(traces)
        turns = read_traces(traces)
        if not turns:
            raise ValueError(f"{traces}: no turn traces in it")
    except (OSError, ValueError) as exc:
        Console(stderr=True, soft_wrap=True).print(
            f"[bold red]cannot report[/] {escape(str(exc))}", highlight=False
        )
        raise typer.Exit(EXIT_NO_TRACES) from exc
    budget, recorded = BudgetConfig(), None
    if run is not None:
        budget, recorded = run.budget, run.config
    if config is not None:
        settings = load_config_or_exit(config)
        budget, recorded = settings.budget, settings.model_dump(mode="json")
    build_report(
        turns,
        out,
        budget=budget,
        config=recorded,
        machine=run.machine if run else machine_description(),
        command=run.command if run else shlex.join(["cadence", *sys.argv[1:]]),
    )
    Console().print((out / REPORT_FILE).read_text(encoding="utf-8"), markup=False, highlight=False)
