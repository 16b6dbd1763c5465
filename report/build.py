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
from cadence.report.files import write_report
from cadence.report.markdown import render_markdown
from cadence.report.plots import PLOTS, figures
from cadence.report.run_info import RUN_FILE, RunInfo, run_info_json
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
    info = RunInfo(machine=machine, command=command, config=config, budget=budget)
    write_report(
        out,
        {
            RUN_FILE: run_info_json(info),
            SUMMARY_FILE: summary.to_json(),
            REPORT_FILE: render_markdown(summary, PLOTS),
            **figures(group_by_variant(traces), summary.variant, budget),
        },
    )
    return summary
