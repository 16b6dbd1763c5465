"""The one statistics module (``core/stats.py``), against figures worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cadence.core.stats import auc, median, percentile, percentiles


def test_a_percentile_interpolates_between_the_closest_ranks() -> None:
    samples = [40.0, 10.0, 30.0, 20.0]  # sorted: 10 20 30 40, ranks 0..3
    assert median(samples) == 25.0  # halfway between the middle two
    assert percentile(samples, 90) == pytest.approx(37.0)  # rank 2.7: 30 + 0.7 × 10
    assert percentile(samples, 0) == 10.0
    assert percentile(samples, 100) == 40.0
    assert percentile(iter([5.0]), 99) == 5.0  # any iterable


def test_no_samples_have_no_percentile_and_no_figures() -> None:
    with pytest.raises(ValueError, match="no samples"):
        median([])
    assert percentiles([]) == {"p50": None, "p95": None, "p99": None, "max": None}
    assert percentiles([], (50, 90)) == {"p50": None, "p90": None, "max": None}


def test_percentiles_name_each_tail_and_the_maximum() -> None:
    samples = [float(v) for v in range(1, 12)]  # 1 … 11: rank r holds r + 1
    assert percentiles(samples, (50, 90)) == {"p50": 6.0, "p90": 10.0, "max": 11.0}


def test_the_auc_counts_pairs_and_a_tie_as_half() -> None:
    # Positives 0.9, 0.5; negatives 0.5, 0.1: pairs (0.9>0.5) (0.9>0.1) (0.5=0.5) (0.5>0.1).
    scores = [0.9, 0.5, 0.5, 0.1]
    labels = [1, 1, 0, 0]
    assert auc(scores, labels) == pytest.approx(3.5 / 4)
    assert auc(np.array([0.2, 0.8]), np.array([1, 0])) == 0.0  # every pair the wrong way
    assert math.isnan(auc([0.3, 0.4], [1, 1]))  # no negative: no figure
