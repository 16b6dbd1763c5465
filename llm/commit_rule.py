"""Which masked positions a denoising step commits, and how a late block lowers τ.

Confidence-ordered commits pick the easiest positions first, and the easiest are the end of
turn and padding: committed early, they squeeze the sentence into the positions left of them.
So an end-of-turn or padding prediction may be committed only when every position to its left
is committed already.
"""

from __future__ import annotations

from collections.abc import Collection

import torch


def select_commits(
    confidence: torch.Tensor,
    prediction: torch.Tensor,
    masked: torch.Tensor,
    threshold: float,
    end_ids: Collection[int],
) -> torch.Tensor:
    """Boolean ``[block]`` of the positions to commit this step: every eligible masked position
    with ``confidence >= threshold``, and at least the most confident eligible one.

    ``confidence`` and ``prediction`` are the top probability and its token per position;
    ``masked`` marks the positions still masked (at least one must be).
    """
    masked_before = (masked.cumsum(0) - masked.long()) > 0
    ends = torch.isin(prediction, torch.tensor(list(end_ids), dtype=prediction.dtype))
    eligible = masked & ~(ends & masked_before)
    commit = eligible & (confidence >= threshold)
    if not bool(commit.any()):
        best = torch.where(eligible, confidence, torch.full_like(confidence, -1.0)).argmax()
        commit[best] = True
    return commit


def deadline_threshold(threshold: float, elapsed_ms: float, budget_ms: float) -> float:
    """τ for a block ``elapsed_ms`` into its ``budget_ms``: unchanged while on time, then
    falling linearly to 0 (commit everything) at twice the budget."""
    if elapsed_ms <= budget_ms:
        return threshold
    return threshold * max(0.0, 2.0 - elapsed_ms / budget_ms)
