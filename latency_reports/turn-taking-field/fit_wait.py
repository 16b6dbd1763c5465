"""Choose the continuous wait's two settings on the development clips, and read the held-out
ones at the choice — measured once for docs/end-of-turn.md ("The wait"), kept beside its
reports (not part of any package or of the suite).

Each report is a ``cadence bench-turns … --no-live`` run's ``turn_taking.json``: its offline
cases (every mid-turn pause: silence and P) and its ends (P of each whole turn), per audio
path, with the language model. ``pause_scale_ms`` and ``max_wait_ms`` are chosen on the
development reports (both audio paths pooled) as the pair whose curve needs the least median
wait to hold cut-offs to ``--budget`` (10 %: at 5 % every turn that ended would wait about a
second on these clips — docs/end-of-turn.md); ``confidence`` as the one that holds them
there at that wait. Then every report, development and held out, is read at that setting
and over its whole curve.

    python latency_reports/turn-taking-field/fit_wait.py \\
        --dev latency_reports/turn-taking-field/voices-dev/turn_taking.json \\
        --dev latency_reports/turn-taking-field/read-speech/turn_taking.json \\
        --held-out latency_reports/turn-taking-field/voices-test/turn_taking.json \\
        --out latency_reports/turn-taking-field/fit.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from cadence.pipeline.config import EndOfTurnConfig
from cadence.tooling.bench.tradeoff import (
    CONFIDENCES,
    TARGET_RATE,
    Curve,
    PausedCase,
    at_setting,
    continuous_curve,
    field_figures,
)

SCALES_MS = (100, 150, 200, 300, 400, 600, 800)
BAND = (200.0, 1200.0, 0.85, 0.75)
"""The rule this one replaced (min_wait_ms, max_wait_ms, complete_at, incomplete_at): the
least wait at P ≥ 0.85, the most at P ≤ 0.75, linear between — read here beside it."""


def band_wait_ms(p: float) -> float:
    least, most, complete_at, incomplete_at = BAND
    doubt = min(max((complete_at - p) / (complete_at - incomplete_at), 0.0), 1.0)
    return least + (most - least) * doubt


def band_point(cases: list[PausedCase], ends: list[float]) -> dict[str, float | None]:
    cut = sum(band_wait_ms(c.p) < c.silence_ms for c in cases)
    paid = sorted(band_wait_ms(p) for p in ends)
    return {
        "cut_offs": cut / len(cases) if cases else None,
        "median_wait_ms": float(np.median(paid)) if paid else None,
        "mean_wait_ms": float(np.mean(paid)) if paid else None,
    }


MAX_WAITS_MS = (1500, 2000, 2500, 3000)
MODEL = "lm model"


def cases_of(report: dict[str, Any]) -> dict[str, tuple[list[PausedCase], list[float]]]:
    """Per audio path: the mid-turn pauses and the ends' P, for the language model."""
    out = {}
    for name, figures in report["tradeoff"].items():
        if not name.endswith(MODEL):
            continue
        cases = [PausedCase(**c) for c in figures["cases"]]
        ends = [h["p"] for h in figures["heard_complete"]]
        out[name.removesuffix(f", {MODEL}")] = (cases, ends)
    return out


def _least(curve: Curve, budget: float) -> dict[str, float] | None:
    """The setting of the least median wait that holds cut-offs within ``budget``."""
    within = [
        p
        for p in curve.points
        if p.talk_over_rate is not None
        and p.talk_over_rate <= budget
        and p.median_wait_ms is not None
    ]
    if not within:
        return None
    best = min(within, key=lambda p: (p.median_wait_ms or 0.0, p.setting))
    return {
        "confidence": best.setting,
        "median_wait_ms": best.median_wait_ms or 0.0,
        "cut_offs": best.talk_over_rate or 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dev", type=Path, action="append", required=True)
    parser.add_argument("--held-out", type=Path, action="append", default=[])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget", type=float, default=0.10, choices=(0.05, 0.10))
    args = parser.parse_args()
    base = EndOfTurnConfig()
    dev_cases: list[PausedCase] = []
    dev_ends: list[float] = []
    for path in args.dev:
        for cases, ends in cases_of(json.loads(path.read_text())).values():
            dev_cases += cases
            dev_ends += ends
    by_setting: dict[str, dict[str, Any]] = {}
    for scale in SCALES_MS:
        for top in MAX_WAITS_MS:
            options = base.model_copy(update={"pause_scale_ms": float(scale), "max_wait_ms": top})
            curve = continuous_curve(dev_cases, dev_ends, options)
            by_setting[f"{scale}/{top}"] = field_figures(curve) | {
                "pause_scale_ms": scale,
                "max_wait_ms": top,
                "at_5_percent": _least(curve, 0.05),
                "at_10_percent": _least(curve, 0.10),
            }
    budget = f"at_{round(100 * args.budget)}_percent"
    best = min(
        (row for row in by_setting.values() if row[budget]),
        key=lambda row: (row[budget]["median_wait_ms"], row["max_wait_ms"]),
    )
    chosen = base.model_copy(
        update={
            "pause_scale_ms": float(best["pause_scale_ms"]),
            "max_wait_ms": best["max_wait_ms"],
            "confidence": best[budget]["confidence"],
        }
    )
    options = chosen
    result: dict[str, Any] = {
        "dev": [str(p) for p in args.dev],
        "dev_pauses": len(dev_cases),
        "dev_ends": len(dev_ends),
        "target_rate": TARGET_RATE,
        "confidences_swept": [CONFIDENCES[0], CONFIDENCES[-1], len(CONFIDENCES)],
        "chosen_for": budget,
        "chosen": {
            "pause_scale_ms": chosen.pause_scale_ms,
            "max_wait_ms": chosen.max_wait_ms,
            "confidence": chosen.confidence,
        },
        "by_setting": by_setting,
        "reports": {},
    }
    for path in [*args.dev, *args.held_out]:
        for audio, (cases, ends) in cases_of(json.loads(path.read_text())).items():
            point = at_setting(cases, ends, chosen)
            curve = continuous_curve(cases, ends, options)
            result["reports"][f"{path.parent.name}, {audio}"] = {
                "held_out": path in args.held_out,
                "pauses": len(cases),
                "ends": len(ends),
                "at_chosen": {
                    "cut_offs": point.talk_over_rate,
                    "median_wait_ms": point.median_wait_ms,
                    "mean_wait_ms": point.mean_wait_ms,
                    "p90_wait_ms": point.p90_wait_ms,
                },
                "field": field_figures(curve),
                "two_valued_band": band_point(cases, ends),
            }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
