"""Latency budget reports from turn traces: ``summary.json``, ``report.md`` and PNG plots.

See ``docs/report.md`` for the files and what each trace must carry for each part.
"""

from cadence.report.build import REPORT_FILE, SUMMARY_FILE, build_report
from cadence.report.run_info import RUN_FILE, RunInfo, read_run_info
from cadence.report.summary import (
    SCHEMA_ID,
    DiscardedStats,
    LatencyStats,
    ReportSummary,
    SpeculationCounts,
    ToolStats,
    VariantSummary,
)

__all__ = [
    "REPORT_FILE",
    "RUN_FILE",
    "SCHEMA_ID",
    "SUMMARY_FILE",
    "DiscardedStats",
    "LatencyStats",
    "ReportSummary",
    "RunInfo",
    "SpeculationCounts",
    "ToolStats",
    "VariantSummary",
    "build_report",
    "read_run_info",
]
