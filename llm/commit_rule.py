"""Which masked positions a denoising step commits, and how a late block lowers τ.

Confidence-ordered commits pick the easiest positions first, and the easiest are the end of
turn and padding: committed early, they squeeze the sentence into the positions left of them.
So an end-of-turn or padding prediction may be committed only when every position to its left
is committed already. The rule itself lives in :mod:`cadence.kernels.commit_reference`, fused with
the softmax that precedes it (the decoder calls :func:`cadence.kernels.commit_decision`); what is
left here is how a block running late against its budget lowers τ.
"""

from __future__ import annotations


def deadline_threshold(threshold: float, elapsed_ms: float, budget_ms: float) -> float:
    """τ for a block ``elapsed_ms`` into its ``budget_ms``: unchanged while on time, then
    falling linearly to 0 (commit everything) at twice the budget."""
    if elapsed_ms <= budget_ms:
        return threshold
    return threshold * max(0.0, 2.0 - elapsed_ms / budget_ms)
