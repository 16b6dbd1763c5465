"""PyTorch reference implementations: the ground truth every fast kernel is tested against,
and what runs wherever the Triton kernels do not (every CPU)."""

from __future__ import annotations

import torch
from torch.nn import functional


def attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None
) -> torch.Tensor:
    """Scaled dot-product attention.

    ``q`` is ``[batch, heads, queries, dim]``, ``k``/``v`` are ``[batch, heads, keys, dim]``,
    ``allowed`` is a boolean mask broadcastable to ``[batch, heads, queries, keys]`` (``True`` =
    may attend) or ``None`` for full attention. Every query row must allow at least one key:
    a row with none yields NaN in SDPA, so callers let padding attend to itself.
    """
    return functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


def block_visibility(cache_lengths: torch.Tensor, keys: int, block: int) -> torch.Tensor:
    """``[batch, keys]``: which keys the current block sees when the first ``keys - block``
    are cache slots of which the first ``cache_lengths[b]`` hold positions (the rest is
    padding up to the bucket size) and the last ``block`` are the block itself."""
    slots = keys - block
    index = torch.arange(keys, device=cache_lengths.device)
    return (index < cache_lengths[:, None]) | (index >= slots)


def block_attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache_lengths: torch.Tensor
) -> torch.Tensor:
    """Attention of the current block's queries over a padded KV cache plus the block itself.

    ``q`` is ``[batch, heads, block, dim]``; ``k``/``v`` are ``[batch, kv_heads, slots + block,
    dim]``: ``slots`` cache slots, of which the first ``cache_lengths[b]`` are valid, followed
    by the block's own keys, which every query of the block sees (attention is bidirectional
    inside a block). ``heads`` is a multiple of ``kv_heads`` (grouped-query attention).
    """
    block = q.shape[2]
    visible = block_visibility(cache_lengths, k.shape[2], block)[:, None, None, :]
    return functional.scaled_dot_product_attention(
        q, k, v, attn_mask=visible, enable_gqa=q.shape[1] != k.shape[1]
    )
