"""``cadence bench-turns``' report: ``turn_taking.json``, ``turn_taking.md`` and
``tradeoff.png`` (the talk-over rate against the wait complete turns pay), written by the one
report writer (``report/files.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from cadence.report.files import write_report
from cadence.tooling.bench.interruptions import AFTER_HEARD_MS
from cadence.tooling.bench.tradeoff import (
    TARGET_RATE,
)
from cadence.tooling.bench.turn_taking import (
    JSON_FILE,
    MARKDOWN_FILE,
    PLOT_FILE,
)


def write_turn_taking(report: Mapping[str, Any], out: Path) -> None:
    """``turn_taking.json``, ``turn_taking.md`` and ``tradeoff.png`` into ``out``."""
    write_report(
        out,
        {
            JSON_FILE: report,
            MARKDOWN_FILE: render_markdown(report),
            PLOT_FILE: tradeoff_plot(report.get("tradeoff", {})),
        },
    )


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f} %"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f} ms"


def _history(text: str | None) -> str:
    return "–" if text is None else (text or "(empty)")


def _needed_line(curve: Mapping[str, Any], rule: str) -> str:
    needed = curve.get("needed")
    if needed is None:
        return f"{rule}: no setting in the sweep keeps cut-offs under {_pct(TARGET_RATE)}"
    if curve["rule"] == "fixed":
        return (
            f"{rule}: W = {_ms(needed['setting'])} ({_pct(needed['talk_over_rate'])} "
            f"cut off); every turn that ended waits {_ms(needed['median_wait_ms'])}"
        )
    return (
        f"{rule}: confidence {needed['setting']:.4f} ({_pct(needed['talk_over_rate'])} cut "
        f"off); turns that ended wait {_ms(needed['median_wait_ms'])} (median), mean "
        f"{_ms(needed['mean_wait_ms'])}, p90 {_ms(needed['p90_wait_ms'])}"
    )


def _field_rows(audio: str, curves: Mapping[str, Any]) -> list[str]:
    """The field's four figures of each rule, one table row each."""
    rows = []
    for rule, figures in curves.get("field", {}).items():
        rows.append(
            f"| {audio} | {rule} | {_pct(figures['cut_offs_at_300_ms'])} | "
            f"{_pct(figures['cut_offs_at_600_ms'])} | {_ms(figures['wait_at_5_percent_ms'])} | "
            f"{_ms(figures['wait_at_10_percent_ms'])} |"
        )
    return rows


def render_markdown(report: Mapping[str, Any]) -> str:
    lines = ["# Turn-taking", ""]
    lines += [
        f"Manifest `{report.get('manifest')}`; {report.get('machine', '')}.",
        f"Command: `{report.get('command')}`.",
        f"End of turn: `{json.dumps(report.get('end_of_turn'))}`.",
        "",
    ]
    for transport, live in report.get("live", {}).items():
        complete, paused = live["complete"], live["paused"]
        v2v = complete["voice_to_voice_ms"]
        outcomes = ", ".join(f"{k} {v}" for k, v in complete["outcomes"].items() if v)
        lines += [
            f"## {transport}",
            "",
            f"**Complete clips** ({complete['clips']} clips, {complete['turns']} turns): "
            f"voice-to-voice p50 {_ms(v2v['p50'])}, p90 {_ms(v2v['p90'])} over "
            f"{v2v['count']} turns answered after the end of speech. Turns: {outcomes or '–'}; "
            f"replies that yielded within a syllable when the caller went on (talked over, "
            f"counted above): {complete.get('yielded', 0)}.",
            "",
            "**Paused clips**: replies heard before the true end of speech.",
            "",
            "| pause | clips | talked over | rate | of them in/after the pause | "
            "early commits withdrawn | of them yielded after a moment | answered after the end |",
            "|---|---|---|---|---|---|---|---|",
        ]
        rows = [*paused["by_pause"], paused["target_bucket"], paused["all"]]
        names = [f"{r['pause_s']} s" for r in paused["by_pause"]] + ["**0.5–1 s**", "all"]
        for name, row in zip(names, rows, strict=True):
            lines.append(
                f"| {name} | {row['clips']} | {row['talked_over']} | "
                f"{_pct(row['talk_over_rate'])} | {row['into_pause']} | {row['withdrawn']} | "
                f"{row.get('yielded', 0)} | {row['answered']} |"
            )
        lines.append("")
        false = live.get("false_interruptions")
        if false:
            summary = live.get("false_interruptions_summary") or {}
            lines += [
                f"**False interruptions**: a sound played over the reply to "
                f"`{live.get('question')}`, {AFTER_HEARD_MS:.0f} ms after it was first heard. "
                f"{summary.get('false_interruptions', '–')} of {summary.get('soft_sounds', '–')} "
                f"backchannels and noises cut the reply, {summary.get('resumed', '–')} resumed "
                f"it; {summary.get('words_cut', '–')} of {summary.get('words', '–')} real "
                "interruptions cut it.",
                "",
                "| sound | kind | length | should | did | reply heard after it | "
                "the agent's turn in the history |",
                "|---|---|---|---|---|---|---|",
            ]
            for case in false:
                lines.append(
                    f"| {case['name']} | {case['kind']} | {_ms(case['sound_ms'])} | "
                    f"{case.get('expected', '–')} | {case['result']} | "
                    f"{_ms(case.get('reply_ms_after'))} | {_history(case.get('heard_text'))} |"
                )
            lines.append("")
    tradeoff = report.get("tradeoff", {})
    if tradeoff:
        lines += [
            "## The trade-off (offline), measured as the field measures it",
            "",
            "Every pause of the caller's (the speakers' own, as the engine's VAD hears them, "
            "and the inserted ones) is mid-turn; the end of each clip is the end of the turn. "
            "A rule cuts off a pause when its wait at the P of what was heard by then is "
            "shorter than the pause's silence; a turn that ended pays the rule's wait at its P. "
            "Within a wait budget: the least cut-off rate of any setting whose median wait is "
            "within it; within a cut-off budget: the least median wait.",
            "",
            "| audio | rule | cut-offs at a 300 ms wait | at 600 ms | wait at 5 % cut-offs "
            "| at 10 % |",
            "|---|---|---|---|---|---|",
        ]
        for audio, figures in tradeoff.items():
            if "all" in figures:
                lines += _field_rows(audio, figures["all"])
        lines.append("")
        for audio, figures in tradeoff.items():
            for scope, curves in figures.items():
                if scope not in ("all", "target_bucket"):
                    continue
                label = "every pause" if scope == "all" else "inserted pauses of 0.5–1 s"
                lines.append(
                    f"**{audio}, {label}** ({curves['fixed']['cases']} pauses, "
                    f"{curves['fixed']['complete_turns']} ends): the smallest wait under "
                    f"{_pct(TARGET_RATE)} cut-offs —"
                )
                lines.append("")
                lines.append(f"- {_needed_line(curves['fixed'], 'fixed wait')}")
                if "continuous" in curves:
                    lines.append(f"- {_needed_line(curves['continuous'], 'continuous wait')}")
                    at = curves["at_setting"]
                    lines.append(
                        f"- at the configured setting (confidence {at['setting']:.4f}): "
                        f"{_pct(at['talk_over_rate'])} cut off, turns that ended wait "
                        f"{_ms(at['median_wait_ms'])} (median), mean {_ms(at['mean_wait_ms'])}, "
                        f"p90 {_ms(at['p90_wait_ms'])}"
                    )
                lines.append("")
        lines += [f"![trade-off]({PLOT_FILE})", ""]
    for name, model in _models(report).items():
        lines += [f"## The {name} model outside its training domains", ""]
        if model.get("error"):
            lines += [f"Not measured: {model['error']}", ""]
        for audio, acc in model.get("accuracy", {}).items():
            lines += [
                f"**{audio}** (threshold {acc['threshold']:.3f}):",
                "",
                "| set | label | utterances | right | accuracy |",
                "|---|---|---|---|---|",
            ]
            for set_name, row in acc.items():
                if set_name == "threshold":
                    continue
                lines.append(
                    f"| {set_name} | {row['label']} | {row['count']} | {row['right']} | "
                    f"{_pct(row['accuracy'])} |"
                )
            lines.append("")
        if model.get("recorded"):
            lines += [
                "Recorded by `train-turn-model` (sgd_test and the rest), from the weights' "
                f"metadata: `{json.dumps(model['recorded'])[:1500]}`",
                "",
            ]
    return "\n".join(lines)


def _models(report: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The end-of-turn models the report measured (reports before the language model have the
    text model alone, as ``text_model``)."""
    if "end_of_turn_models" in report:
        return dict(report["end_of_turn_models"])
    return {"text": report["text_model"]} if report.get("text_model") else {}


def tradeoff_plot(tradeoff: Mapping[str, Any]) -> Figure:
    """Talk-over rate against the wait complete turns pay, both rules, every audio path."""
    fig = Figure(figsize=(7.5, 4.8))
    ax = fig.add_subplot()
    styles = {"all": "-", "target_bucket": "--"}
    colors = {"fixed": "C0", "continuous": "C1"}
    drawn = False
    for number, (audio, figures) in enumerate(tradeoff.items()):
        for scope, curves in figures.items():
            if scope not in styles:
                continue
            for rule in ("fixed", "continuous"):
                curve = curves.get(rule)
                if not curve or not curve["points"] or (rule == "fixed" and number > 0):
                    continue  # the fixed wait reads no transcript: one audio path draws it
                points = [
                    p
                    for p in curve["points"]
                    if p["talk_over_rate"] is not None and p["median_wait_ms"] is not None
                ]
                xs = [p["median_wait_ms"] for p in points]
                ys = [100 * p["talk_over_rate"] for p in points]
                label = f"{rule}, {audio}, {'all pauses' if scope == 'all' else '0.5–1 s'}"
                ax.plot(
                    xs,
                    ys,
                    styles[scope],
                    color=colors[rule],
                    alpha=max(0.3, 1.0 - 0.2 * number),
                    label=label,
                )
                drawn = True
            at = curves.get("at_setting")
            if at and at["talk_over_rate"] is not None and scope == "all":
                ax.plot(
                    [at["median_wait_ms"]],
                    [100 * at["talk_over_rate"]],
                    "o",
                    color="C3",
                    label=f"configured, {audio}",
                )
    ax.axhline(100 * TARGET_RATE, color="grey", linestyle=":", label="5 % target")
    ax.set_xlabel("wait paid by a turn that ended, ms (median)")
    ax.set_ylabel("mid-turn pauses cut off, %")
    ax.set_title("False cut-offs against the wait")
    ax.set_ylim(0, 100)
    if drawn:
        ax.legend(fontsize=7, loc="upper right")
    else:
        ax.text(0.5, 0.5, "no pauses", transform=ax.transAxes, ha="center")
    fig.tight_layout()
    return fig
