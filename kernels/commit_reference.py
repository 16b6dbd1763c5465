"""Reference of the fused commit step: from a block's logits to the positions it commits.

One denoising step of block diffusion turns the logits of the current block into a decision:
per position the top probability (softmax over the vocabulary, some ids banned) and its
token, then every masked position at least ``threshold`` confident commits, and at least the
most confident one. An end-of-turn or padding token may commit only when nothing left of it
is masked: committed early, those easy predictions squeeze the sentence into the positions
left of them. Everything here is tensor arithmetic, with no host synchronisation, so the same
rule runs inside a captured CUDA graph and as the ground truth of the Triton kernel.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch.nn import functional


class CommitDecision(NamedTuple):
    """What one denoising step decides, per position of the block (``[..., block]``)."""

    commit: torch.Tensor
    """``True`` where the position commits its prediction this step."""
    prediction: torch.Tensor
    """The most probable token (int64; 0 where the logits are all −inf)."""
    confidence: torch.Tensor
    """Its probability (0 where the logits are all −inf: there is nothing to commit)."""


def top_predictions(
    logits: torch.Tensor, banned: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top probability and its token for each row of ``logits`` ``[..., vocab]`` (any float
    dtype; the softmax is float32), with the ``banned`` ids excluded: int64 ids, or a boolean
    mask ``[vocab]`` (``True`` = banned). A row with only −inf logits has no distribution (its
    softmax is NaN): it gets confidence 0 and token 0 rather than NaN."""
    if banned.dtype == torch.bool:
        excluded = logits.masked_fill(banned, float("-inf"))
    else:
        excluded = logits.index_fill(-1, banned, float("-inf"))
    probabilities = excluded.softmax(-1, dtype=torch.float32)
    confidence, prediction = probabilities.max(-1)
    defined = ~confidence.isnan()
    zero = torch.zeros((), dtype=confidence.dtype, device=confidence.device)
    return torch.where(defined, confidence, zero), torch.where(defined, prediction, 0)


def select_commits(
    confidence: torch.Tensor,
    prediction: torch.Tensor,
    masked: torch.Tensor,
    threshold: float | torch.Tensor,
    ends: torch.Tensor,
) -> torch.Tensor:
    """Boolean ``[..., block]`` of the positions to commit: every eligible masked position
    with ``confidence >= threshold``, and at least the most confident eligible one (the
    first of equals). A position is eligible when it is masked, has a prediction
    (confidence above 0) and does not predict one of ``ends`` while a position left of it is
    still masked."""
    masked_before = (masked.cumsum(-1) - masked.long()) > 0
    ending = torch.isin(prediction, ends)
    eligible = masked & ~(ending & masked_before) & (confidence > 0)
    commit = eligible & (confidence >= threshold)
    score = torch.where(eligible, confidence, torch.full_like(confidence, -1.0))
    best = functional.one_hot(score.argmax(-1), masked.shape[-1]).bool()
    return commit | (best & eligible & ~commit.any(-1, keepdim=True))


def commit_reference(
    logits: torch.Tensor,
    masked: torch.Tensor,
    threshold: float | torch.Tensor,
    banned: torch.Tensor,
    ends: torch.Tensor,
) -> CommitDecision:
    """The whole step for ``logits`` ``[batch, block, vocab]`` (row *i* predicts position
    *i*) and ``masked`` ``[batch, block]``; ``banned`` is int64 token ids or a boolean mask
    of the vocabulary, ``ends`` int64 token ids."""
    confidence, prediction = top_predictions(logits, banned)
    commit = select_commits(confidence, prediction, masked, threshold, ends)
    return CommitDecision(commit, prediction, confidence)
