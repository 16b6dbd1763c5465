"""The turn-taking trade-off, offline: how often a wait rule answers into a mid-sentence pause,
against the wait every complete turn pays — for any setting, with no rerun of the pipeline.

Each paused clip gives one case: the silence of its pause as the engine measures its wait
(``silence_ms``: from the end of speech the endpointer dates to where speech resumes) and
P(complete) of what the engine would have heard by then (``p``: the text model's score of
whisper's transcript of the audio before the pause). Each complete clip
gives P of whisper's transcript of all of it. A rule answers into a pause when its wait at
that P is shorter than the silence — the commit comes while the caller is still in the pause
(whether the reply is then heard before the caller goes on, or withdrawn unheard, depends on
how fast it comes; either way the rule gave the turn away). A complete turn pays the rule's
wait at its P.

* **Fixed**: wait W of VAD silence whatever was said (no model), for W from 100 to 2000 ms.
* **Adaptive**: ``end_of_turn_wait_ms(p, options)`` — the runtime's own rule
  (``cadence.pipeline.end_of_turn``): ``min_wait_ms`` at P ≥ ``complete_at``, ``max_wait_ms``
  at P ≤ ``incomplete_at``, linear between — swept over ``max_wait_ms``.

For each rule, the smallest wait (W; or ``max_wait_ms``, with the mean and p90 that complete
turns then pay) that keeps the talk-over rate under ``TARGET_RATE``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from cadence.core.stats import percentile
from cadence.pipeline.config import EndOfTurnConfig
from cadence.pipeline.end_of_turn import end_of_turn_wait_ms

TARGET_RATE = 0.05
"""Issue 17's target: at most 5 % of mid-sentence pauses answered into."""
FIXED_WAITS_MS = tuple(range(100, 2001, 50))
MAX_WAITS_MS = tuple(range(200, 3001, 50))
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


@dataclass(frozen=True)
class CurvePoint:
    setting_ms: float
    """W for the fixed rule, ``max_wait_ms`` for the adaptive one."""
    talk_over_rate: float | None
    """Share of the paused cases answered into (``None`` without any)."""
    talk_overs: int
    mean_wait_ms: float | None
    """Mean wait paid by the complete turns (``None`` without any)."""
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
        setting_ms=float(setting),
        talk_over_rate=_rate(hits, len(cases)),
        talk_overs=hits,
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


def adaptive_curve(
    cases: Sequence[PausedCase],
    complete_p: Sequence[float],
    options: EndOfTurnConfig,
    max_waits_ms: Sequence[int] = MAX_WAITS_MS,
) -> Curve:
    """The adaptive rule with ``options``' ``min_wait_ms``, ``complete_at`` and
    ``incomplete_at``, for each ``max_wait_ms`` of ``max_waits_ms`` (those below
    ``min_wait_ms`` are skipped)."""
    points = []
    for top in max_waits_ms:
        if top < options.min_wait_ms:
            continue
        rule = options.model_copy(update={"max_wait_ms": int(top)})
        points.append(
            _point(
                top,
                [end_of_turn_wait_ms(c.p, rule) for c in cases],
                cases,
                [end_of_turn_wait_ms(p, rule) for p in complete_p],
            )
        )
    return Curve("adaptive", points, len(cases), len(complete_p), _needed(points))


def at_setting(
    cases: Sequence[PausedCase], complete_p: Sequence[float], options: EndOfTurnConfig
) -> CurvePoint:
    """The adaptive rule at exactly ``options``."""
    return _point(
        options.max_wait_ms,
        [end_of_turn_wait_ms(c.p, options) for c in cases],
        cases,
        [end_of_turn_wait_ms(p, options) for p in complete_p],
    )


def in_bucket(case: PausedCase, bucket: tuple[float, float] = TARGET_BUCKET_S) -> bool:
    low, high = bucket
    return low - 1e-9 <= case.pause_s <= high + 1e-9
