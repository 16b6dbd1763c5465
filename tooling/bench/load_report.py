"""The load test's report: the latency budget report with one variant per load level
(``report.md``), and beside it ``load.md`` — what load does besides latency: calls refused,
errors, resident memory and open files over time and their growth, tasks left behind — with
``load.png`` (voice-to-voice against sessions) and ``resources.png`` (memory and files over
time)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from cadence.pipeline.config import BudgetConfig
from cadence.pipeline.tracing import TurnTrace
from cadence.report.aggregate import summarize_variant
from cadence.report.build import build_report
from cadence.report.files import write_report
from cadence.report.summary import VariantSummary
from cadence.report.variants import group_by_variant
from cadence.tooling.bench.load import LevelResult, level_name

LOAD_REPORT = "load.md"
MAX_ERRORS_LISTED = 10


def write_load_report(
    traces: Sequence[TurnTrace],
    results: Sequence[LevelResult],
    leaked: Sequence[str],
    out: Path,
    *,
    budget: BudgetConfig,
    config: dict[str, Any],
    machine: str,
    command: str,
) -> str:
    """Write both reports into ``out``; returns ``load.md``'s text."""
    build_report(traces, out, budget=budget, config=config, machine=machine, command=command)
    groups = group_by_variant(traces)
    levels = {
        result.sessions: summarize_variant(groups.get(level_name(result.sessions), []), budget)
        for result in results
    }
    text = _markdown(results, levels, leaked, budget, machine=machine, command=command)
    write_report(
        out,
        {
            LOAD_REPORT: text,
            "load.png": _latency_figure(results, levels, budget),
            "resources.png": _resources_figure(results),
        },
    )
    return text


def _markdown(
    results: Sequence[LevelResult],
    levels: dict[int, VariantSummary],
    leaked: Sequence[str],
    budget: BudgetConfig,
    *,
    machine: str,
    command: str,
) -> str:
    rows = [
        "| sessions | minutes | calls | refused | errors | turns | voice-to-voice p50 | p95 "
        "| within budget | CPU per call (s) | memory (MB) | memory growth after warm-up "
        "| open files |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        summary = levels[result.sessions]
        v2v = summary.voice_to_voice_ms
        memory, files = result.growth("rss_mb"), result.growth("open_fds")
        rss = [s.rss_mb for s in result.samples]
        fds = [s.open_fds for s in result.samples]
        rows.append(
            f"| {result.sessions} | {result.minutes:g} | {result.calls} | {result.refused} "
            f"| {len(result.errors)} | {summary.turns} | {_ms(v2v.p50)} | {_ms(v2v.p95)} "
            f"| {_share(summary.within_budget_fraction)} "
            f"| {'–' if (cpu := result.cpu_s_per_call) is None else f'{cpu:.2f}'} "
            f"| {f'{rss[0]:.0f} → {rss[-1]:.0f}' if rss else '–'} "
            f"| {f'{memory.percent:+.1f} % ({memory.per_minute:+.2f} MB/min)' if memory else '–'} "
            f"| {f'{min(fds)}–{max(fds)}' if fds else '–'}"
            f"{f' ({files.per_minute:+.2f}/min)' if files else ''} |"
        )
    errors = [error for result in results for error in result.errors]
    sections = [
        "# Load test\n",
        f"Machine: {machine}.  \nCommand: `{command}`.  \n"
        f"Each session places call after call through a real endpoint of the server (one clip "
        f"per call, an emulated caller on loopback) for the level's minutes. Voice-to-voice budget "
        f"{budget.voice_to_voice:g} ms. Latencies per level, stage by stage: `report.md`.\n",
        "\n".join(rows) + "\n",
        "![Voice-to-voice against concurrent sessions](load.png)\n",
        "![Memory and open files over time](resources.png)\n",
        "## Left behind\n\n"
        + (
            f"Tasks still running after the server closed: {len(leaked)} — "
            + ", ".join(f"`{name}`" for name in leaked[:MAX_ERRORS_LISTED])
            if leaked
            else "Tasks still running after the server closed: none."
        )
        + "\n",
        "## Errors\n\n"
        + (
            "\n".join(f"- {error}" for error in errors[:MAX_ERRORS_LISTED])
            + (f"\n- … and {len(errors) - MAX_ERRORS_LISTED} more" if len(errors) > 10 else "")
            if errors
            else "None."
        )
        + "\n",
    ]
    return "\n".join(sections)


def _latency_figure(
    results: Sequence[LevelResult], levels: dict[int, VariantSummary], budget: BudgetConfig
) -> Figure:
    figure = Figure(figsize=(6.4, 4.0))
    ax = figure.add_subplot()
    sessions = [result.sessions for result in results]
    for quantile, style in (("p50", "o-"), ("p95", "s--")):
        values = [getattr(levels[n].voice_to_voice_ms, quantile) for n in sessions]
        ax.plot(sessions, [float("nan") if v is None else v for v in values], style, label=quantile)
    ax.axhline(budget.voice_to_voice, color="grey", linewidth=1, label="budget")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sessions, [str(n) for n in sessions])
    ax.set_xlabel("concurrent sessions")
    ax.set_ylabel("voice-to-voice (ms)")
    ax.legend()
    ax.set_title("Voice-to-voice under load")
    return figure


def _resources_figure(results: Sequence[LevelResult]) -> Figure:
    figure = Figure(figsize=(6.4, 5.0))
    memory, files = figure.subplots(2, 1, sharex=True)
    for result in results:
        minutes = [s.at_s / 60 for s in result.samples]
        label = level_name(result.sessions)
        memory.plot(minutes, [s.rss_mb for s in result.samples], label=label)
        files.plot(minutes, [s.open_fds for s in result.samples], label=label)
    memory.set_ylabel("resident memory (MB)")
    files.set_ylabel("open files")
    files.set_xlabel("minutes into the level")
    memory.legend(fontsize="small")
    memory.set_title("Process resources over time")
    return figure


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


def _share(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f} %"
