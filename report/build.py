"""``build_report``: traces in, a report directory out (``summary.json``, ``report.md``, the
plots and ``run.json``). The bench calls it after a run; ``cadence report`` calls it on a trace
log. Everything in it is a function of the traces (in order) and the budget, plus the
machine, command and config it is told, which it only records."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from cadence.pipeline.config import BudgetConfig
from cadence.pipeline.tracing import TurnTrace
from cadence.report.aggregate import summarize
from cadence.report.markdown import render_markdown
from cadence.report.plots import PLOTS, write_plots
from cadence.report.run_info import RunInfo, write_run_info
from cadence.report.summary import ReportSummary
from cadence.report.variants import group_by_variant

SUMMARY_FILE: Final = "summary.json"
REPORT_FILE: Final = "report.md"


def build_report(
    traces: Sequence[TurnTrace],
    out: Path,
    *,
    budget: BudgetConfig,
    config: dict[str, Any] | None,
    machine: str,
    command: str | None,
) -> ReportSummary:
    """Write the report of ``traces`` into ``out`` and return its summary. Raises
    ``ValueError`` when there are no traces."""
    summary = summarize(traces, budget, config=config, machine=machine, command=command)
    out.mkdir(parents=True, exist_ok=True)
    write_run_info(RunInfo(machine=machine, command=command, config=config, budget=budget), out)
    (out / SUMMARY_FILE).write_text(summary.to_json(), encoding="utf-8")
    (out / REPORT_FILE).write_text(render_markdown(summary, PLOTS), encoding="utf-8")
    write_plots(group_by_variant(traces), summary.variant, budget, out)
    return summary
