"""Summary statistics of latency samples (medians and tails, never means)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt


def percentiles(samples: Sequence[float]) -> dict[str, float | None]:
    """p50/p95/p99/max of ``samples`` (all ``None`` when there are none)."""
    if not samples:
        return {"p50": None, "p95": None, "p99": None, "max": None}
    values = np.asarray(samples, dtype=np.float64)
    return {
        "p50": float(np.percentile(values, 50)),
        "p95": float(np.percentile(values, 95)),
        "p99": float(np.percentile(values, 99)),
        "max": float(values.max()),
    }


def auc(scores: npt.NDArray[np.float64], labels: npt.NDArray[np.int64]) -> float:
    """Area under the ROC curve of ``scores`` for ``labels`` (1 positive): the chance that a
    positive outscores a negative, a tie counting half (tied scores share their mean rank)."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    _, tied, counts = np.unique(scores, return_inverse=True, return_counts=True)
    ranks = (np.bincount(tied, weights=ranks) / counts)[tied]
    positives = labels == 1
    n_pos, n_neg = int(positives.sum()), int((~positives).sum())
    if not n_pos or not n_neg:
        return float("nan")
    return float((ranks[positives].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
