"""Triton kernel of block attention (reference:
:func:`cadence.kernels.reference.block_attention_reference`).

A decode step's queries are the current block; its keys are the conversation's cache (padded
to a bucket size so that the shapes stay fixed between steps, hence a per-sequence valid
length) followed by the block itself, which every query sees. One program handles one query
head of one sequence: it walks the valid cache slots in chunks, then the block, keeping a
flash-style running maximum, rescaled denominator and accumulator, so the scores are never
written out and the padding past a sequence's length is never read. Grouped-query attention
maps query head ``h`` to key/value head ``h // (heads // kv_heads)``.

The block is padded to 16 query rows because ``tl.dot`` needs 16 on each side; the padded
rows and every masked key enter as −inf, and the running maximum is replaced by 0 while it is
still −inf, so no lane produces NaN.
"""

from __future__ import annotations

import torch
import triton  # type: ignore[import-untyped]  # Triton ships no type information
import triton.language as tl  # type: ignore[import-untyped]

KEY_CHUNK = 32
"""Keys per iteration of the cache walk."""
MIN_DOT = 16
"""Smallest size ``tl.dot`` accepts on each side."""


@triton.jit  # type: ignore[untyped-decorator]
def _online_softmax_update(
    q: tl.tensor,
    k: tl.tensor,
    v: tl.tensor,
    visible: tl.tensor,
    running_max: tl.tensor,
    total: tl.tensor,
    acc: tl.tensor,
    scale: float,
    precision: tl.constexpr,
) -> tuple[tl.tensor, tl.tensor, tl.tensor]:
    """Fold one chunk of keys into the running softmax state of every query row."""
    scores = tl.dot(q, tl.trans(k), input_precision=precision) * scale
    scores = tl.where(visible, scores, float("-inf"))
    new_max = tl.maximum(running_max, tl.max(scores, axis=1))
    shift = tl.where(new_max == float("-inf"), 0.0, new_max)
    rescale = tl.exp(running_max - shift)
    weights = tl.exp(scores - shift[:, None])
    total = total * rescale + tl.sum(weights, axis=1)
    acc = acc * rescale[:, None] + tl.dot(weights.to(v.dtype), v, input_precision=precision)
    return new_max, total, acc


@triton.jit  # type: ignore[untyped-decorator]
def _block_attention_kernel(
    q_ptr: tl.tensor,
    k_ptr: tl.tensor,
    v_ptr: tl.tensor,
    lengths_ptr: tl.tensor,
    out_ptr: tl.tensor,
    heads: int,
    group: int,
    block: int,
    slots: int,
    dim: int,
    scale: float,
    stride_qb: int,
    stride_qh: int,
    stride_qt: int,
    stride_kb: int,
    stride_kh: int,
    stride_kt: int,
    stride_vb: int,
    stride_vh: int,
    stride_vt: int,
    stride_ob: int,
    stride_oh: int,
    stride_ot: int,
    block_m: tl.constexpr,
    block_n: tl.constexpr,
    block_d: tl.constexpr,
    precision: tl.constexpr,
) -> None:
    program = tl.program_id(0)
    batch = program // heads
    head = program % heads
    kv_head = head // group
    rows = tl.arange(0, block_m)
    cols = tl.arange(0, block_d)
    row_ok = rows < block
    col_ok = cols < dim

    q = tl.load(
        q_ptr + batch * stride_qb + head * stride_qh + rows[:, None] * stride_qt + cols[None, :],
        mask=row_ok[:, None] & col_ok[None, :],
        other=0.0,
    )
    k_base = k_ptr + batch * stride_kb + kv_head * stride_kh + cols[None, :]
    v_base = v_ptr + batch * stride_vb + kv_head * stride_vh + cols[None, :]

    running_max = tl.full([block_m], float("-inf"), tl.float32)
    total = tl.zeros([block_m], tl.float32)
    acc = tl.zeros([block_m, block_d], tl.float32)

    length = tl.minimum(tl.load(lengths_ptr + batch), slots)
    for start in range(0, length, block_n):
        keys = start + tl.arange(0, block_n)
        key_ok = keys < length
        load_mask = key_ok[:, None] & col_ok[None, :]
        k = tl.load(k_base + keys[:, None] * stride_kt, mask=load_mask, other=0.0)
        v = tl.load(v_base + keys[:, None] * stride_vt, mask=load_mask, other=0.0)
        visible = row_ok[:, None] & key_ok[None, :]
        running_max, total, acc = _online_softmax_update(
            q, k, v, visible, running_max, total, acc, scale, precision
        )

    own = tl.arange(0, block_m)  # the block's keys, padded like its queries
    own_ok = own < block
    load_mask = own_ok[:, None] & col_ok[None, :]
    k = tl.load(k_base + (slots + own)[:, None] * stride_kt, mask=load_mask, other=0.0)
    v = tl.load(v_base + (slots + own)[:, None] * stride_vt, mask=load_mask, other=0.0)
    visible = row_ok[:, None] & own_ok[None, :]
    running_max, total, acc = _online_softmax_update(
        q, k, v, visible, running_max, total, acc, scale, precision
    )

    out = acc / tl.where(total > 0, total, 1.0)[:, None]
    tl.store(
        out_ptr + batch * stride_ob + head * stride_oh + rows[:, None] * stride_ot + cols[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=row_ok[:, None] & col_ok[None, :],
    )


def block_attention_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache_lengths: torch.Tensor
) -> torch.Tensor:
    """Same contract as :func:`cadence.kernels.reference.block_attention_reference`; the last
    dimension of each tensor must be contiguous."""
    batch, heads, block, dim = q.shape
    kv_heads, keys = k.shape[1], k.shape[2]
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads cannot share {kv_heads} key/value heads")
    out = torch.empty_like(q)
    _block_attention_kernel[(batch * heads,)](
        q,
        k,
        v,
        cache_lengths,
        out,
        heads,
        heads // kv_heads,
        block,
        keys - block,
        dim,
        dim**-0.5,
        *q.stride()[:3],
        *k.stride()[:3],
        *v.stride()[:3],
        *out.stride()[:3],
        block_m=max(MIN_DOT, triton.next_power_of_2(block)),
        block_n=KEY_CHUNK,
        block_d=max(MIN_DOT, triton.next_power_of_2(dim)),
        precision="ieee" if q.dtype == torch.float32 else "tf32",
    )
    return out
