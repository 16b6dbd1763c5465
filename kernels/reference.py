"""PyTorch reference implementations: the ground truth every fast kernel is tested against."""

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
