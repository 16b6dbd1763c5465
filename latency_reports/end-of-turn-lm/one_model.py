"""One model for the end of turn and the reply? The base SmolLM2 against the reply's own
network (the AR adapter merged in), each with the calibration fit for it on sgd_dev, scored on
the held-out turn sets: sgd_test (each user turn whole against one cut mid-sentence:
``cadence calibrate-turn-lm``'s metrics, read from the two runs' files) and the 34 speech
clips' reference transcripts (``tests/data/speech/manifest.jsonl``: each whole, against every
cut at a word boundary, after the agent's greeting).

Measured once for docs/end-of-turn.md ("One model") and kept beside its report; run from the
repository root after the two calibrations:

    cadence calibrate-turn-lm --out llm/pretrained/turn_end_calibration.json \\
        --metrics latency_reports/end-of-turn-lm/calibration.json --max-dialogues 150
    cadence calibrate-turn-lm --config CONFIG_WITH_models.lm.model=embedded:smollm2-ar \\
        --out llm/pretrained/turn_end_calibration.smollm2-ar.json \\
        --metrics latency_reports/end-of-turn-lm/calibration-smollm2-ar.json --max-dialogues 150
    python latency_reports/end-of-turn-lm/one_model.py \\
        --out latency_reports/end-of-turn-lm/one_model.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cadence.core.stats import auc
from cadence.llm.pretrained.options import LanguageModelOptions
from cadence.pipeline.model_loading import load_turn_end_model

AGENT = "Thanks for calling. What can I do for you today?"
REPORTS = Path("latency_reports/end-of-turn-lm")


def clip_auc(model_name: str, texts: list[str]) -> dict[str, float]:
    scorer = load_turn_end_model(LanguageModelOptions(model=model_name))
    scores: list[float] = []
    labels: list[int] = []
    for text in texts:
        words = text.split()
        session = scorer.session()
        for count in range(1, len(words) + 1):
            scores.append(session.probability(" ".join(words[:count]), AGENT))
            labels.append(int(count == len(words)))
    threshold = scorer.calibration.threshold
    whole = [s for s, label in zip(scores, labels, strict=True) if label]
    cut = [s for s, label in zip(scores, labels, strict=True) if not label]
    return {
        "auc_whole_vs_cut": round(auc(scores, labels), 4),
        "whole_right": round(sum(s >= threshold for s in whole) / len(whole), 4),
        "cut_right": round(sum(s < threshold for s in cut) / len(cut), 4),
        "threshold": threshold,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, default=Path("tests/data/speech/manifest.jsonl"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    texts = [json.loads(line)["text"] for line in args.manifest.read_text().splitlines() if line]
    report = {}
    for name, metrics in (
        ("embedded:smollm2", REPORTS / "calibration.json"),
        ("embedded:smollm2-ar", REPORTS / "calibration-smollm2-ar.json"),
    ):
        fit = json.loads(metrics.read_text())
        fit = fit.get(metrics.name, fit)
        report[name] = {
            "sgd_test": {
                key: value
                for key, value in fit["test"]["at_threshold"].items()
                if key.startswith("auc") or key in ("complete", "incomplete_clear")
            },
            "clips": clip_auc(name, texts),
        }
        print(name, json.dumps(report[name]))
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
