"""Choose the continuous wait's two settings on the development clips, and read the held-out
ones at the choice — measured once for docs/end-of-turn.md ("The wait"), kept beside its
reports (not part of any package or of the suite).

Each report is a ``cadence bench-turns … --no-live`` run's ``turn_taking.json``: its offline
cases (every mid-turn pause: silence and P) and its ends (P of each whole turn), per audio
path, with the language model. ``pause_scale_ms`` is chosen on the development reports (both
audio paths pooled) as the one whose curve needs the least median wait to hold cut-offs to
5 %; ``confidence`` as the least that holds them there. Then every report, development and
held out, is read at that setting and over its whole curve.

    python latency_reports/turn-taking-field/fit_wait.py \\
        --dev latency_reports/turn-taking-field/voices-dev/turn_taking.json \\
        --held-out latency_reports/turn-taking-field/voices-test/turn_taking.json \\
        --held-out latency_reports/turn-taking-field/read-speech/turn_taking.json \\
        --out latency_reports/turn-taking-field/fit.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from cadence.pipeline.config import EndOfTurnConfig
from cadence.tooling.bench.tradeoff import (
    CONFIDENCES,
    TARGET_RATE,
    PausedCase,
    at_setting,
    continuous_curve,
    field_figures,
)

SCALES_MS = (50, 75, 100, 150, 200, 300, 400, 600)
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dev", type=Path, action="append", required=True)
    parser.add_argument("--held-out", type=Path, action="append", default=[])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    base = EndOfTurnConfig()
    dev_cases: list[PausedCase] = []
    dev_ends: list[float] = []
    for path in args.dev:
        for cases, ends in cases_of(json.loads(path.read_text())).values():
            dev_cases += cases
            dev_ends += ends
    by_scale = {}
    for scale in SCALES_MS:
        options = base.model_copy(update={"pause_scale_ms": float(scale)})
        curve = continuous_curve(dev_cases, dev_ends, options)
        by_scale[scale] = field_figures(curve) | {
            "needed": None if curve.needed is None else curve.needed.setting
        }
    usable = [s for s in SCALES_MS if by_scale[s]["wait_at_5_percent_ms"] is not None]
    scale = min(usable, key=lambda s: (by_scale[s]["wait_at_5_percent_ms"], s))
    options = base.model_copy(update={"pause_scale_ms": float(scale)})
    confidence = by_scale[scale]["needed"]
    chosen = options.model_copy(update={"confidence": confidence})
    result: dict[str, Any] = {
        "dev": [str(p) for p in args.dev],
        "dev_pauses": len(dev_cases),
        "dev_ends": len(dev_ends),
        "target_rate": TARGET_RATE,
        "confidences_swept": [CONFIDENCES[0], CONFIDENCES[-1], len(CONFIDENCES)],
        "by_scale": by_scale,
        "chosen": {"pause_scale_ms": scale, "confidence": confidence},
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
            }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
