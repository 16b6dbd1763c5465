"""The turn-taking trade-off, offline, measured the way the field measures it: at every pause
of the caller's, how often a wait rule answers into a pause the caller was going to speak
after (a *false cut-off*), against the wait it adds after the turns that really ended — for
any setting, with no rerun of the pipeline.

Each mid-turn pause gives one case: its silence as the engine measures its wait
(``silence_ms``: from the end of speech the endpointer dates to where speech resumes) and
P(complete) of what the engine would have heard by then (``p``: the end-of-turn model's score
of whisper's transcript of the audio before the pause). Each true end of a turn gives the P
of whisper's transcript of all of it. A rule cuts off a pause when its wait at that P is
shorter than the silence — the commit comes while the caller is still in the pause (whether
the reply is then heard before the caller goes on, or withdrawn unheard, depends on how fast
it comes; either way the rule gave the turn away). A turn that ended pays the rule's wait at
its P.

* **Fixed**: wait W of VAD silence whatever was said (no model), for W from 100 to 2000 ms.
* **Continuous**: ``end_of_turn_wait_ms(p, options)`` — the runtime's own rule
  (``cadence.pipeline.end_of_turn``), swept over its one knob, ``confidence``.

Read as LiveKit's eot-bench reads its curves (:func:`field_figures`): the false cut-off rate
within a wait budget (300 and 600 ms: the least rate of any setting whose median wait is
within it), and the wait a cut-off budget costs (5 % and 10 %: the least median wait of any
setting within it). Also, for each rule, the smallest setting that keeps cut-offs under
``TARGET_RATE`` (``needed``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from cadence.core.stats import percentile
from cadence.pipeline.config import EndOfTurnConfig
from cadence.pipeline.end_of_turn import end_of_turn_wait_ms

TARGET_RATE = 0.05
"""At most 5 % of mid-turn pauses cut off."""
FIXED_WAITS_MS = tuple(range(100, 2001, 25))
CONFIDENCES = tuple(round(1 / (1 + math.exp(-z / 8)), 6) for z in range(-16, 81))
"""``confidence`` from 0.12 to 0.99995, evenly in log-odds (eighths)."""
WAIT_BUDGETS_MS = (300, 600)
CUT_OFF_BUDGETS = (0.05, 0.10)
TARGET_BUCKET_S = (0.5, 1.0)
"""The pause lengths issue 17's target is about (inclusive)."""


@dataclass(frozen=True)
class PausedCase:
    clip_id: str
    pause_s: float
    silence_ms: float
    """The pause's silence, as the engine measures its wait (``silence_s`` of the manifest)."""
    p: float
    """P(complete) of the transcript at the pause."""
    inserted: bool = True
    """A pause the bench put in the clip (else one of the speaker's own)."""
    at_s: float | None = None
    """Where in the clip (as the engine hears it) the pause begins."""


@dataclass(frozen=True)
class CurvePoint:
    setting: float
    """W (ms) for the fixed rule, ``confidence`` for the continuous one."""
    talk_over_rate: float | None
    """Share of the mid-turn pauses cut off (``None`` without any)."""
    talk_overs: int
    median_wait_ms: float | None
    """Median wait paid by the turns that ended (``None`` without any)."""
    mean_wait_ms: float | None
    p90_wait_ms: float | None


@dataclass(frozen=True)
class Curve:
    rule: str
    points: list[CurvePoint]
    cases: int
    complete_turns: int
    needed: CurvePoint | None
    """The first point (smallest setting) with a talk-over rate under ``TARGET_RATE``."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def answered_into(wait_ms: float, case: PausedCase) -> bool:
    return wait_ms < case.silence_ms


def _rate(hits: int, total: int) -> float | None:
    return hits / total if total else None


def _point(
    setting: float,
    waits_paused: Sequence[float],
    cases: Sequence[PausedCase],
    waits_complete: Sequence[float],
) -> CurvePoint:
    hits = sum(answered_into(w, c) for w, c in zip(waits_paused, cases, strict=True))
    paid = np.asarray(waits_complete, np.float64)
    return CurvePoint(
        setting=float(setting),
        talk_over_rate=_rate(hits, len(cases)),
        talk_overs=hits,
        median_wait_ms=percentile(paid, 50) if len(paid) else None,
        mean_wait_ms=float(paid.mean()) if len(paid) else None,
        p90_wait_ms=percentile(paid, 90) if len(paid) else None,
    )


def _needed(points: Sequence[CurvePoint]) -> CurvePoint | None:
    return next(
        (p for p in points if p.talk_over_rate is not None and p.talk_over_rate < TARGET_RATE),
        None,
    )


def fixed_curve(
    cases: Sequence[PausedCase],
    complete_p: Sequence[float],
    waits_ms: Sequence[float] = FIXED_WAITS_MS,
) -> Curve:
    """The fixed wait W: every turn waits W, whatever it said."""
    points = [_point(w, [w] * len(cases), cases, [w] * len(complete_p)) for w in waits_ms]
    return Curve("fixed", points, len(cases), len(complete_p), _needed(points))


def continuous_curve(
    cases: Sequence[PausedCase],
    complete_p: Sequence[float],
    options: EndOfTurnConfig,
    confidences: Sequence[float] = CONFIDENCES,
) -> Curve:
    """The continuous rule with ``options``' other settings, for each ``confidence``."""
    points = []
    for confidence in confidences:
        rule = options.model_copy(update={"confidence": float(confidence)})
        points.append(
            _point(
                confidence,
                [end_of_turn_wait_ms(c.p, rule) for c in cases],
                cases,
                [end_of_turn_wait_ms(p, rule) for p in complete_p],
            )
        )
    return Curve("continuous", points, len(cases), len(complete_p), _needed(points))


def at_setting(
    cases: Sequence[PausedCase], complete_p: Sequence[float], options: EndOfTurnConfig
) -> CurvePoint:
    """The continuous rule at exactly ``options``."""
    return _point(
        options.confidence,
        [end_of_turn_wait_ms(c.p, options) for c in cases],
        cases,
        [end_of_turn_wait_ms(p, options) for p in complete_p],
    )


def field_figures(curve: Curve) -> dict[str, Any]:
    """eot-bench's two readings of a curve: the least cut-off rate within each wait budget
    (median wait ≤ 300 / 600 ms), and the least median wait within each cut-off budget
    (≤ 5 % / 10 %); ``None`` where no setting of the sweep meets the budget."""
    points = [p for p in curve.points if p.talk_over_rate is not None and p.median_wait_ms]
    out: dict[str, Any] = {}
    for budget_ms in WAIT_BUDGETS_MS:
        within = [
            p for p in points if p.median_wait_ms is not None and p.median_wait_ms <= budget_ms
        ]
        best = min(within, key=lambda p: (p.talk_over_rate, p.median_wait_ms), default=None)
        out[f"cut_offs_at_{budget_ms}_ms"] = None if best is None else best.talk_over_rate
    for budget in CUT_OFF_BUDGETS:
        within = [p for p in points if p.talk_over_rate is not None and p.talk_over_rate <= budget]
        best = min(within, key=lambda p: (p.median_wait_ms, p.talk_over_rate), default=None)
        out[f"wait_at_{round(100 * budget)}_percent_ms"] = (
            None if best is None else best.median_wait_ms
        )
    return out


def in_bucket(case: PausedCase, bucket: tuple[float, float] = TARGET_BUCKET_S) -> bool:
    """An inserted pause of a length in ``bucket``."""
    low, high = bucket
    return case.inserted and low - 1e-9 <= case.pause_s <= high + 1e-9
