"""Which masked positions a denoising step commits, and how a late block lowers τ.

Confidence-ordered commits pick the easiest positions first, and the easiest are the end of
turn and padding: committed early, they squeeze the sentence into the positions left of them.
So an end-of-turn or padding prediction may be committed only when every position to its left
is committed already. The rule itself lives in :mod:`cadence.kernels.commit_reference`, fused with
the softmax that precedes it (the decoder calls :func:`cadence.kernels.commit_decision`); what is
left here is how a block running late against its budget lowers τ: to commit more of the
positions the model is fairly sure of, never to commit a whole block of guesses (a block
committed at τ 0 on a slow CPU read "Please confirm a a shared ride for 1 Wang Wang Wah Wah";
docs/llm.md). Below the floor a step still commits its one most confident position, as on time.
"""

from __future__ import annotations

LATE_FLOOR = 0.5
"""The lowest τ a late block reaches, as a share of the configured τ (0.35 at τ 0.7)."""


def deadline_threshold(threshold: float, elapsed_ms: float, budget_ms: float) -> float:
    """τ for a block ``elapsed_ms`` into its ``budget_ms``: unchanged while on time, then
    falling linearly to ``LATE_FLOOR · τ`` at twice the budget, and no lower."""
    if elapsed_ms <= budget_ms:
        return threshold
    late = min(elapsed_ms / budget_ms - 1.0, 1.0)
    return threshold * (1.0 - (1.0 - LATE_FLOOR) * late)
