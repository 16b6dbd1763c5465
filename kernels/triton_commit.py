"""Triton kernels of the fused commit step (reference: :mod:`cadence.kernels.commit_reference`).

Two launches, so that a 151,936-token vocabulary is read by many multiprocessors at once:

1. ``_partial_kernel``, one program per (block position, vocabulary chunk): an online softmax
   over its chunk (running maximum, rescaled sum, first index of the maximum) with the banned
   ids read from a boolean mask of the vocabulary, written out as three partials. A block of
   32 over 151,936 tokens is 32 × 38 programs; the old kernel ran one program per sequence,
   which left all but one multiprocessor idle and took 8× the reference's time.
2. ``_decide_kernel``, one program per sequence: folds each position's partials (the global
   maximum, the sum rescaled to it, the token of the first chunk that holds the maximum) into
   the top probability ``1 / sum(exp(logit - max))`` and its token, then applies the commit
   rule — the threshold, the end-of-turn guard and "at least the most confident" — as
   reductions over the block.

The banned ids are a mask, not a list loaded as one block: any number of them works (the old
kernel compared every chunk against every banned id, a ``[chunk, banned]`` tensor that
Triton refuses past a million elements, and the families ban thousands of ids). The end
tokens are few and are compared one by one in a loop. Nothing comes back to the host, so the
step can be captured in a CUDA graph; τ is read from device memory for the same reason.

Lanes that see only −inf (banned ids, the vocabulary's tail, rows past the block, a row whose
logits are all −inf) never produce NaN: the running maximum is replaced by 0 wherever it is
still −inf before it is subtracted.
"""

from __future__ import annotations

import torch
import triton  # type: ignore[import-untyped]  # Triton ships no type information
import triton.language as tl  # type: ignore[import-untyped]

from cadence.kernels.commit_reference import CommitDecision

VOCAB_TILE = 4096
"""Logits one program reads per iteration."""
VOCAB_CHUNK = 4096
"""Vocabulary per program of the first kernel (grown for huge vocabularies, below)."""
MAX_CHUNKS = 256
"""Chunks per position at most: the second kernel holds ``[block, chunks]`` partials."""


@triton.jit  # type: ignore[untyped-decorator]
def _partial_kernel(
    logits_ptr: tl.tensor,
    banned_ptr: tl.tensor,
    max_ptr: tl.tensor,
    sum_ptr: tl.tensor,
    best_ptr: tl.tensor,
    block: int,
    vocab: int,
    chunks: int,
    stride_lb: int,
    stride_lt: int,
    stride_lv: int,
    chunk: tl.constexpr,
    tile: tl.constexpr,
) -> None:
    row = tl.program_id(0)  # batch * block + position
    part = tl.program_id(1)
    base = logits_ptr + (row // block) * stride_lb + (row % block) * stride_lt
    running_max = tl.full([1], float("-inf"), tl.float32)
    total = tl.zeros([1], tl.float32)
    best = tl.zeros([1], tl.int64)
    for offset in range(0, chunk, tile):
        start = part * chunk + offset
        v = start + tl.arange(0, tile)
        inside = v < vocab
        x = tl.load(base + v * stride_lv, mask=inside, other=float("-inf")).to(tl.float32)
        banned = tl.load(banned_ptr + v, mask=inside, other=1) != 0
        x = tl.where(banned, float("-inf"), x)[None, :]
        tile_max = tl.max(x, axis=1)
        tile_best = tl.argmax(x, axis=1, tie_break_left=True).to(tl.int64) + start
        best = tl.where(tile_max > running_max, tile_best, best)  # strict: first index wins
        new_max = tl.maximum(running_max, tile_max)
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)
        total = total * tl.exp(running_max - shift) + tl.sum(tl.exp(x - shift[:, None]), axis=1)
        running_max = new_max
    out = row * chunks + part + tl.arange(0, 1)
    tl.store(max_ptr + out, running_max)
    tl.store(sum_ptr + out, total)
    tl.store(best_ptr + out, best)


@triton.jit  # type: ignore[untyped-decorator]
def _decide_kernel(
    max_ptr: tl.tensor,
    sum_ptr: tl.tensor,
    best_ptr: tl.tensor,
    masked_ptr: tl.tensor,
    threshold_ptr: tl.tensor,
    ends_ptr: tl.tensor,
    commit_ptr: tl.tensor,
    prediction_ptr: tl.tensor,
    confidence_ptr: tl.tensor,
    block: int,
    chunks: int,
    n_ends: int,
    block_t: tl.constexpr,
    block_c: tl.constexpr,
) -> None:
    sequence = tl.program_id(0)
    t = tl.arange(0, block_t)
    c = tl.arange(0, block_c)
    in_block = t < block
    cell = (sequence * block + t)[:, None] * chunks + c[None, :]
    valid = in_block[:, None] & (c < chunks)[None, :]
    part_max = tl.load(max_ptr + cell, mask=valid, other=float("-inf"))
    part_sum = tl.load(sum_ptr + cell, mask=valid, other=0.0)
    part_best = tl.load(best_ptr + cell, mask=valid, other=0)

    running_max = tl.max(part_max, axis=1)
    shift = tl.where(running_max == float("-inf"), 0.0, running_max)
    total = tl.sum(part_sum * tl.exp(part_max - shift[:, None]), axis=1)
    first_chunk = tl.argmax(part_max, axis=1, tie_break_left=True)
    best = tl.sum(tl.where(c[None, :] == first_chunk[:, None], part_best, 0), axis=1)

    defined = running_max > float("-inf")
    confidence = tl.where(defined, 1.0 / tl.where(defined, total, 1.0), 0.0)
    prediction = tl.where(defined, best, 0)

    masked = tl.load(masked_ptr + sequence * block + t, mask=in_block, other=0) != 0
    left = t[None, :] < t[:, None]  # [position, other]: other is left of position
    masked_before = tl.max((left & masked[None, :]).to(tl.int32), axis=1) > 0
    ending = prediction < 0  # all False
    for index in range(0, n_ends):
        ending = ending | (prediction == tl.load(ends_ptr + index))
    eligible = masked & defined & ~(ending & masked_before)
    threshold = tl.load(threshold_ptr)
    commit = eligible & (confidence >= threshold)
    score = tl.where(eligible, confidence, -1.0)
    first_best = tl.argmax(score, axis=0, tie_break_left=True)
    nothing = tl.max(commit.to(tl.int32), axis=0) == 0
    commit = commit | (eligible & nothing & (t == first_best))

    out = sequence * block + t
    tl.store(commit_ptr + out, commit, mask=in_block)
    tl.store(prediction_ptr + out, prediction, mask=in_block)
    tl.store(confidence_ptr + out, confidence, mask=in_block)


def chunk_size(vocab: int) -> int:
    """Vocabulary per program: :data:`VOCAB_CHUNK`, doubled until at most :data:`MAX_CHUNKS`
    chunks cover ``vocab``."""
    size = VOCAB_CHUNK
    while -(-vocab // size) > MAX_CHUNKS:
        size *= 2
    return size


def commit_triton(
    logits: torch.Tensor,
    masked: torch.Tensor,
    threshold: torch.Tensor,
    banned: torch.Tensor,
    ends: torch.Tensor,
) -> CommitDecision:
    """The commit step for ``logits`` ``[batch, block, vocab]`` (any float dtype: read as
    float32) and ``masked`` ``[batch, block]``; ``threshold`` is a one-element float32 tensor
    on the same device, ``banned`` a boolean mask ``[vocab]`` (``True`` = never predicted),
    ``ends`` int64 ids (see :func:`cadence.kernels.commit_reference.commit_reference`)."""
    batch, block, vocab = logits.shape
    if banned.dtype != torch.bool or banned.shape != (vocab,):
        raise ValueError(f"banned must be a boolean mask of the {vocab}-token vocabulary")
    masked = masked.contiguous()
    device = logits.device
    chunk = chunk_size(vocab)
    chunks = -(-vocab // chunk)
    rows = batch * block
    part_max = torch.empty((rows, chunks), dtype=torch.float32, device=device)
    part_sum = torch.empty((rows, chunks), dtype=torch.float32, device=device)
    part_best = torch.empty((rows, chunks), dtype=torch.int64, device=device)
    _partial_kernel[(rows, chunks)](
        logits,
        banned,
        part_max,
        part_sum,
        part_best,
        block,
        vocab,
        chunks,
        logits.stride(0),
        logits.stride(1),
        logits.stride(2),
        chunk=chunk,
        tile=min(VOCAB_TILE, chunk),
        num_warps=8,
    )
    commit = torch.empty((batch, block), dtype=torch.bool, device=device)
    prediction = torch.empty((batch, block), dtype=torch.int64, device=device)
    confidence = torch.empty((batch, block), dtype=torch.float32, device=device)
    _decide_kernel[(batch,)](
        part_max,
        part_sum,
        part_best,
        masked,
        threshold,
        ends,
        commit,
        prediction,
        confidence,
        block,
        chunks,
        ends.numel(),
        block_t=triton.next_power_of_2(block),
        block_c=triton.next_power_of_2(chunks),
    )
    return CommitDecision(commit, prediction, confidence)
