"""The report's figures, drawn with matplotlib's Agg canvas straight to PNG files.

``Figure`` objects are made without ``pyplot``, so no global backend or display is touched
and a bench can draw from any thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from cadence.pipeline.config import BudgetConfig
from cadence.pipeline.tracing import (
    ANSWERED_IN_TIME,
    STAGE_LATENCIES,
    AnchorEvent,
    TurnOutcome,
    TurnTrace,
    turn_outcome,
)
from cadence.report.anchor import end_anchor, voice_to_voice_ms
from cadence.report.stages import LABELS, STAGE_NAMES

WATERFALL_TURNS: Final = 40
"""At most this many turns in the waterfall (chosen evenly through the run), so it stays
readable at any run length."""

PLOTS: Final = {
    "waterfall.png": "Stage spans per turn, from the end of speech",
    "cdf.png": "Voice-to-voice CDF",
    "stages.png": "Stage latencies against their budget shares",
}
"""File name → caption of every figure ``figures`` draws."""

_COLORS: Final = dict(zip(STAGE_NAMES, ("C0", "C1", "C2", "C3", "C4"), strict=True))


def figures(
    groups: Mapping[str, Sequence[TurnTrace]], primary: str, budget: BudgetConfig
) -> dict[str, Figure]:
    """Every figure of ``PLOTS`` by its file name: the waterfall and the stage boxes of the
    primary variant, the CDF of every variant."""
    return {
        "waterfall.png": waterfall(groups[primary], primary, budget),
        "cdf.png": voice_to_voice_cdf(groups, budget),
        "stages.png": stage_boxes(groups[primary], primary, budget),
    }


def waterfall(turns: Sequence[TurnTrace], variant: str, budget: BudgetConfig) -> Figure:
    """One row per turn: each stage drawn from its start anchor to its end anchor, time 0 at
    the end of speech. A negative span (speculative STT done before the endpoint, a reply
    started before the final transcript) is drawn hatched and see-through over its neighbour."""
    aligned = [turn for turn in turns if AnchorEvent.USER_SPEECH_END in turn.events]
    if len(aligned) > WATERFALL_TURNS:
        picks = np.linspace(0, len(aligned) - 1, WATERFALL_TURNS).round().astype(int)
        aligned = [aligned[i] for i in picks]
    fig = Figure(figsize=(10, 1.8 + 0.28 * max(len(aligned), 4)), layout="constrained")
    ax = fig.subplots()
    negative = False
    for row, turn in enumerate(aligned):
        origin = turn.events[AnchorEvent.USER_SPEECH_END]
        for latency in STAGE_LATENCIES:
            if latency.start not in turn.events or latency.end not in turn.events:
                continue
            start = turn.events[latency.start] - origin
            end = turn.events[latency.end] - origin
            color = _COLORS[latency.name]
            if end >= start:
                ax.barh(row, end - start, left=start, height=0.7, color=color, zorder=2)
            else:  # on top of whatever it overlaps, which stays visible through it
                negative = True
                ax.barh(
                    row, start - end, left=end, height=0.7, facecolor="none", edgecolor=color,
                    hatch="////", linewidth=1, zorder=3,
                )  # fmt: skip
    ax.set_yticks(range(len(aligned)), [_turn_label(turn) for turn in aligned], fontsize=7)
    ax.set_ylim(len(aligned) - 0.5, -0.5)
    stages = [Patch(color=_COLORS[name], label=LABELS[name]) for name in STAGE_NAMES]
    fig.legend(
        handles=[*stages, _budget_line(ax, budget)], loc="outside lower center", ncol=6,
        fontsize=8,
    )  # fmt: skip
    ax.set_xlabel(
        "ms after the end of the caller's speech"
        + (
            "\nhatched: a negative span, drawn over the stage it overlaps (the stage finished "
            "before its start anchor, e.g. a speculative decode before the endpoint)"
            if negative
            else ""
        ),
        fontsize=8,
    )
    ax.set_title(f"Stage spans per turn ({variant}, {len(aligned)} of {len(turns)} turns)")
    if not aligned:
        _no_data(ax, "no turn has user_speech_end")
    return fig


def voice_to_voice_cdf(groups: Mapping[str, Sequence[TurnTrace]], budget: BudgetConfig) -> Figure:
    """Voice-to-voice of the turns answered after the end of speech, as a share of every
    caller turn: a curve that stops short of 1 is the share talked over, unanswered or failed."""
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.subplots()
    anchors: set[str] = set()
    for name, turns in groups.items():
        anchor = end_anchor(turns)
        anchors.add(anchor.value)
        outcomes = [turn_outcome(turn) for turn in turns]
        caller_turns = sum(o is not TurnOutcome.WITHDRAWN for o in outcomes)
        samples = np.sort(
            [
                v
                for turn, outcome in zip(turns, outcomes, strict=True)
                if outcome in ANSWERED_IN_TIME
                and (v := voice_to_voice_ms(turn, anchor)) is not None
            ]
        )
        if samples.size:
            share = np.arange(1, samples.size + 1) / caller_turns
            label = f"{name} ({samples.size} of {caller_turns} turns answered)"
            ax.step(samples, share, where="post", label=label)
    _budget_line(ax, budget)
    ax.set_xlabel("voice-to-voice, ms")
    ax.set_ylabel("share of turns")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ends = " / ".join(sorted(anchors)) or "audio_out_first"
    ax.set_title(f"Voice-to-voice: end of speech → {ends}, share of caller turns")
    return fig


def stage_boxes(turns: Sequence[TurnTrace], variant: str, budget: BudgetConfig) -> Figure:
    """A box per stage (whiskers at 5 % and 95 %) over the turns answered after the end of
    speech, as in the summary, its budget share marked beside it."""
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.subplots()
    shares = budget.model_dump()
    turns = [turn for turn in turns if turn_outcome(turn) in ANSWERED_IN_TIME]
    measured = [
        (position, name, samples)
        for position, name in enumerate(STAGE_NAMES)
        if (samples := [v for turn in turns if (v := turn.latencies_ms[name]) is not None])
    ]
    if measured:
        ax.boxplot(
            [samples for _, _, samples in measured],
            positions=[position for position, _, _ in measured],
            whis=(5, 95),
            widths=0.5,
        )
    ax.scatter(
        range(len(STAGE_NAMES)),
        [shares[name] for name in STAGE_NAMES],
        marker="_",
        s=900,
        color="red",
        label="budget share",
        zorder=3,
    )
    ax.set_xticks(range(len(STAGE_NAMES)), [LABELS[name] for name in STAGE_NAMES])
    ax.axhline(0, color="grey", linewidth=0.5)
    ax.set_ylabel("ms")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(f"Stage latencies ({variant}) against their shares")
    if not measured:
        _no_data(ax, "no stage was measured")
    return fig


def _turn_label(turn: TurnTrace) -> str:
    clip = turn.annotations.get("clip_id")
    label = str(clip) if clip is not None else f"{turn.session_id} #{turn.turn}"
    return label if len(label) <= 28 else "…" + label[-27:]


def _budget_line(ax: Axes, budget: BudgetConfig) -> Line2D:
    return ax.axvline(
        budget.voice_to_voice,
        color="red",
        linestyle="--",
        linewidth=1,
        label=f"budget {budget.voice_to_voice:.0f} ms",
    )


def _no_data(ax: Axes, message: str) -> None:
    ax.text(0.5, 0.5, message, transform=ax.transAxes, ha="center", va="center")
