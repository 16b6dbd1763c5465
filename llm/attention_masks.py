"""Who may attend to whom, as boolean masks (``True`` = may attend).

Positions are absolute token positions in the conversation. Block-causal attention (the
diffusion model) lets a position see every position of its own block and of earlier blocks;
causal attention (the AR baseline) every position up to itself.
"""

from __future__ import annotations

import torch

from cadence.llm.model import AttentionMode


def visibility(
    query_positions: torch.Tensor,
    key_positions: torch.Tensor,
    mode: AttentionMode,
    block_size: int,
) -> torch.Tensor:
    """``[..., queries, keys]`` mask from ``[..., queries]`` and ``[..., keys]`` positions."""
    q = query_positions.unsqueeze(-1)
    k = key_positions.unsqueeze(-2)
    if mode == "causal":
        return k <= q
    return torch.div(k, block_size, rounding_mode="floor") <= torch.div(
        q, block_size, rounding_mode="floor"
    )


def step_mask(start: int, tokens: int, mode: AttentionMode, block_size: int) -> torch.Tensor:
    """Mask ``[1, 1, tokens, start + tokens]`` for a decoding call whose input covers positions
    ``start .. start + tokens`` on top of the ``start`` cached positions before them."""
    queries = torch.arange(start, start + tokens)
    return visibility(queries, torch.arange(start + tokens), mode, block_size)[None, None]
