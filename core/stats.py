"""The one place Cadence summarises samples: its percentile and its AUC.

Why one: every bench, report and training run quotes medians, tails and separations, and two
helpers that disagree (an exclusive against an inclusive quantile, ties counted or not) would
make two reports of the same samples disagree. Every percentile here is numpy's linear
interpolation between the closest ranks (the median of an even count is the mean of its middle
two); figures are medians and tails, never means.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

LATENCY_QUANTILES = (50, 95, 99)
"""The tails a latency report quotes (``percentiles``' default)."""


def percentile(samples: Iterable[float] | npt.NDArray[np.float64], q: float) -> float:
    """The ``q``-th percentile (0–100) of ``samples``, interpolated linearly between ranks.

    Raises ``ValueError`` on no samples: a figure of nothing must be said as such by the
    caller (``percentiles`` gives ``None``), never read as zero.
    """
    values = np.asarray(samples if isinstance(samples, np.ndarray) else list(samples), np.float64)
    if values.size == 0:
        raise ValueError("the percentile of no samples")
    return float(np.percentile(values, q))


def median(samples: Iterable[float] | npt.NDArray[np.float64]) -> float:
    """The 50th ``percentile`` (``ValueError`` on no samples)."""
    return percentile(samples, 50)


def percentiles(
    samples: Sequence[float], quantiles: Sequence[int] = LATENCY_QUANTILES
) -> dict[str, float | None]:
    """``p<q>`` for each of ``quantiles`` and ``max`` of ``samples`` (all ``None`` when there
    are none)."""
    if not samples:
        return dict.fromkeys([*(f"p{q}" for q in quantiles), "max"])
    values = np.asarray(samples, dtype=np.float64)
    figures: dict[str, float | None] = {f"p{q}": percentile(values, q) for q in quantiles}
    figures["max"] = float(values.max())
    return figures


def auc(scores: npt.ArrayLike, labels: npt.ArrayLike) -> float:
    """Area under the ROC curve of ``scores`` for ``labels`` (1 positive, else negative): the
    chance that a positive outscores a negative, a tie counting half (tied scores share their
    mean rank). NaN without both a positive and a negative."""
    scores = np.asarray(scores, dtype=np.float64)
    positives = np.asarray(labels) == 1
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    _, tied, counts = np.unique(scores, return_inverse=True, return_counts=True)
    ranks = (np.bincount(tied, weights=ranks) / counts)[tied]
    n_pos, n_neg = int(positives.sum()), int((~positives).sum())
    if not n_pos or not n_neg:
        return float("nan")
    return float((ranks[positives].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def logit(p: float, floor: float = 1e-9) -> float:
    """log(p / (1 − p)), with p kept ``floor`` away from 0 and 1 so that it is finite."""
    q = min(max(p, floor), 1.0 - floor)
    return math.log(q / (1.0 - q))
