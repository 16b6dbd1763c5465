"""The text end-of-turn model's held-out figures: the threshold, accuracy by kind of
utterance, AUC and the time a score takes.

Every figure is taken through the runtime's own ``TextEndOfTurnModel`` (text in, score out, as
a call scores), so what is reported is what runs. The threshold is chosen against issue 17's
two targets on held-out scores, never on the test corpus.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from cadence.core.stats import auc, median, percentile
from cadence.tooling.training.end_of_turn_examples import Example
from cadence.voice.turn.text_model import TextEndOfTurnModel

TARGET_INCOMPLETE = 0.95
"""Issue 17's target: the share of incomplete utterances classified incomplete."""
TARGET_COMPLETE = 0.92
"""… and of complete ones classified complete."""


def choose_threshold(scores: npt.NDArray[np.float64], labels: npt.NDArray[np.int64]) -> float:
    """The threshold that leaves the larger margin over the weaker of the two targets
    (incomplete right ≥ 95 %, complete right ≥ 92 %), on held-out scores."""
    complete = np.sort(scores[labels == 1])
    incomplete = np.sort(scores[labels == 0])
    best_t, best_margin = 0.5, -math.inf
    for t in np.round(np.arange(0.02, 0.99, 0.005), 3):
        complete_right = 1.0 - np.searchsorted(complete, t, side="left") / len(complete)
        incomplete_right = np.searchsorted(incomplete, t, side="left") / len(incomplete)
        margin = min(incomplete_right - TARGET_INCOMPLETE, complete_right - TARGET_COMPLETE)
        if margin > best_margin + 1e-12:
            best_t, best_margin = float(t), margin
    return best_t


def score_examples(model: TextEndOfTurnModel, examples: Sequence[Example]) -> np.ndarray:
    """The runtime model's scores, through the same path a call takes (text → score)."""
    return np.asarray(
        [model.score(" ".join(e.words), agent_text=e.agent) for e in examples], np.float64
    )


def summarize(
    scores: npt.NDArray[np.float64], examples: Sequence[Example], threshold: float
) -> dict[str, Any]:
    """Accuracy at ``threshold`` of complete and incomplete utterances, by kind."""
    kinds = np.asarray([e.kind for e in examples])
    labels = np.asarray([e.label for e in examples])
    predicted = scores >= threshold
    out: dict[str, Any] = {}

    def share(mask: npt.NDArray[np.bool_], want: bool) -> dict[str, float]:
        n = int(mask.sum())
        right = int((predicted[mask] == want).sum())
        return {"n": n, "accuracy": round(right / n, 4) if n else float("nan")}

    out["complete"] = share(labels == 1, True)
    out["incomplete"] = share(labels == 0, False)
    # Incomplete beyond doubt: cut mid-sentence, or followed by a hesitation ("… and um").
    clear = (labels == 0) & np.isin(kinds, ["mid", "trailing_filler"])
    out["incomplete_clear"] = share(clear, False)
    for kind in ("mid", "sentence_end", "whole_turn", "trailing_filler"):
        mask = kinds == kind
        if mask.any():
            out[f"incomplete_{kind}"] = share(mask, False)
    wrong = (labels == 0) & predicted
    noisy = wrong & np.isin(kinds, ["sentence_end", "whole_turn"])
    out["incomplete_errors_that_are_complete_sentences"] = (
        round(float(noisy.sum() / wrong.sum()), 4) if wrong.any() else 0.0
    )
    out["auc"] = round(auc(scores, labels), 4)
    both = clear | (labels == 1)
    out["auc_complete_vs_clear"] = round(auc(scores[both], labels[both]), 4)
    return out


def time_per_score(
    model: TextEndOfTurnModel, examples: Sequence[Example], rounds: int = 5
) -> dict[str, float]:
    """Microseconds per ``score`` call, one thread, over real utterances with their context:
    the median of each round's per-call median, and the 99th percentile of all calls."""
    texts = [(" ".join(e.words), e.agent) for e in examples]
    for text, agent in texts[:200]:  # warm-up
        model.score(text, agent_text=agent)
    medians: list[float] = []
    every: list[float] = []
    for _ in range(rounds):
        calls: list[float] = []
        for text, agent in texts:
            begin = time.perf_counter_ns()
            model.score(text, agent_text=agent)
            calls.append((time.perf_counter_ns() - begin) / 1000)
        medians.append(median(calls))
        every += calls
    return {
        "median_us": round(median(medians), 1),
        "p99_us": round(percentile(every, 99), 1),
        "calls": len(every),
    }
