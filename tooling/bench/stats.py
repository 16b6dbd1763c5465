"""Summary statistics of latency samples (medians and tails, never means)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


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
