"""Triton kernel of the fused commit step (reference: :mod:`cadence.kernels.commit_reference`).

One program per sequence does the whole step for its block: an online softmax over the
vocabulary in chunks (running maximum, rescaled sum, first index of the maximum) gives each
position's top probability ``1 / sum(exp(logit - max))`` and token; then the threshold, the
end-of-turn guard and the "at least the most confident" rule are reductions over the block
inside the same program. Nothing comes back to the host, so the step needs no
synchronisation and can be captured in a CUDA graph; the threshold is read from device
memory for the same reason (a deadline changes it between replays).

Lanes that see only −inf (banned ids, the vocabulary tail of the last chunk, rows past the
block, a row whose logits are all −inf) never produce NaN: the running maximum is replaced by
0 wherever it is still −inf before it is subtracted.
"""

from __future__ import annotations

import torch
import triton  # type: ignore[import-untyped]  # Triton ships no type information
import triton.language as tl  # type: ignore[import-untyped]

from cadence.kernels.commit_reference import CommitDecision

VOCAB_CHUNK = 512
"""Logits read per position and iteration: 8 positions × 512 fp32 stay in registers."""


@triton.jit  # type: ignore[untyped-decorator]
def _commit_kernel(
    logits_ptr: tl.tensor,
    masked_ptr: tl.tensor,
    threshold_ptr: tl.tensor,
    banned_ptr: tl.tensor,
    ends_ptr: tl.tensor,
    commit_ptr: tl.tensor,
    prediction_ptr: tl.tensor,
    confidence_ptr: tl.tensor,
    block: int,
    vocab: int,
    n_banned: int,
    n_ends: int,
    stride_lb: int,
    stride_lt: int,
    stride_lv: int,
    block_t: tl.constexpr,
    block_v: tl.constexpr,
    block_ids: tl.constexpr,
) -> None:
    row = tl.program_id(0)
    t = tl.arange(0, block_t)
    in_block = t < block
    ids = tl.arange(0, block_ids)
    banned = tl.load(banned_ptr + ids, mask=ids < n_banned, other=-1)
    ends = tl.load(ends_ptr + ids, mask=ids < n_ends, other=-1)

    running_max = tl.full([block_t], float("-inf"), tl.float32)
    total = tl.zeros([block_t], tl.float32)
    best = tl.zeros([block_t], tl.int64)
    base = logits_ptr + row * stride_lb + t[:, None] * stride_lt
    for start in range(0, vocab, block_v):
        v = start + tl.arange(0, block_v)
        x = tl.load(
            base + v[None, :] * stride_lv,
            mask=in_block[:, None] & (v < vocab)[None, :],
            other=float("-inf"),
        ).to(tl.float32)
        is_banned = tl.max((v[:, None] == banned[None, :]).to(tl.int32), axis=1) > 0
        x = tl.where(is_banned[None, :], float("-inf"), x)
        chunk_max = tl.max(x, axis=1)
        chunk_best = tl.argmax(x, axis=1, tie_break_left=True).to(tl.int64) + start
        best = tl.where(chunk_max > running_max, chunk_best, best)  # strict: first index wins
        new_max = tl.maximum(running_max, chunk_max)
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)
        total = total * tl.exp(running_max - shift) + tl.sum(tl.exp(x - shift[:, None]), axis=1)
        running_max = new_max

    defined = running_max > float("-inf")
    confidence = tl.where(defined, 1.0 / tl.where(defined, total, 1.0), 0.0)
    prediction = tl.where(defined, best, 0)

    masked = tl.load(masked_ptr + row * block + t, mask=in_block, other=0) != 0
    left = t[None, :] < t[:, None]  # [position, other]: other is left of position
    masked_before = tl.max((left & masked[None, :]).to(tl.int32), axis=1) > 0
    ending = tl.max((prediction[:, None] == ends[None, :]).to(tl.int32), axis=1) > 0
    eligible = masked & defined & ~(ending & masked_before)
    threshold = tl.load(threshold_ptr)
    commit = eligible & (confidence >= threshold)
    score = tl.where(eligible, confidence, -1.0)
    first_best = tl.argmax(score, axis=0, tie_break_left=True)
    nothing = tl.max(commit.to(tl.int32), axis=0) == 0
    commit = commit | (eligible & nothing & (t == first_best))

    out = row * block + t
    tl.store(commit_ptr + out, commit, mask=in_block)
    tl.store(prediction_ptr + out, prediction, mask=in_block)
    tl.store(confidence_ptr + out, confidence, mask=in_block)


def commit_triton(
    logits: torch.Tensor,
    masked: torch.Tensor,
    threshold: torch.Tensor,
    banned: torch.Tensor,
    ends: torch.Tensor,
) -> CommitDecision:
    """The commit step for ``logits`` ``[batch, block, vocab]`` and ``masked`` ``[batch,
    block]``; ``threshold`` is a one-element float32 tensor on the same device, ``banned``
    and ``ends`` int64 ids (see :func:`cadence.kernels.commit_reference.commit_reference`)."""
    batch, block, vocab = logits.shape
    masked = masked.contiguous()
    commit = torch.empty((batch, block), dtype=torch.bool, device=logits.device)
    prediction = torch.empty((batch, block), dtype=torch.int64, device=logits.device)
    confidence = torch.empty((batch, block), dtype=torch.float32, device=logits.device)
    _commit_kernel[(batch,)](
        logits,
        masked,
        threshold,
        banned,
        ends,
        commit,
        prediction,
        confidence,
        block,
        vocab,
        banned.numel(),
        ends.numel(),
        logits.stride(0),
        logits.stride(1),
        logits.stride(2),
        block_t=triton.next_power_of_2(block),
        block_v=min(VOCAB_CHUNK, triton.next_power_of_2(vocab)),
        block_ids=triton.next_power_of_2(max(banned.numel(), ends.numel(), 1)),
    )
    return CommitDecision(commit, prediction, confidence)
