"""The two objectives of the SmolLM2 adapters: next-token (the autoregressive model) and block
diffusion after Fast-dLLM v2 (the diffusion model, started from the autoregressive one).

Both take the loss only on what the agent writes (``written``), and both apply the LM head
only to the rows that predict such a token (49,152 vocabulary rows × every position would be
most of the work).

**Block diffusion** (Fast-dLLM v2, arXiv 2509.26328, facts from the paper and its training
description; no code of theirs): blocks of :data:`~cadence.tooling.training.lm_adapter.BLOCK_SIZE`
counted from position 0, causal across blocks and bidirectional within one; in each block a
share ``t ~ U(0, 1)`` of the agent's tokens is replaced by the mask, context is never masked.

* *Token shift*: a masked token at position ``j`` is predicted from the output at ``j - 1``,
  as the AR parent predicts it — so the parent's head is kept, and the runtime decoder of
  shifted models (``llm/open_weights/decoder.py``) reads it so. A block's first token comes
  from the last position of the block before it, which is clean, as at decoding time (the
  blocks before are committed and cached).
* *Complementary masks*: each window is seen twice, masked by ``m`` and by ``1 - m`` over the
  agent's tokens, so every such token is predicted once per step, half the variance for one
  more noisy copy.

One sequence carries the clean window and both noisy copies, ``[x | x_m | x_m̄]`` (3 × L
positions, positions ids ``0…L-1`` each): the clean copy attends block-causally to itself; a
noisy copy's block attends to the clean blocks before it and bidirectionally to its own block
of the same copy. The clean rows give the block-first predictions, the noisy rows the others.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional

from cadence.tooling.training.lm_adapter import MASK_ID

COPIES = 2
"""Noisy copies per window (``m`` and its complement)."""


def _hidden(model: nn.Module, ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    inner: Any = model.model
    hidden: torch.Tensor = inner(input_ids=ids, **kwargs).last_hidden_state
    return hidden


def _nll(model: nn.Module, rows: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    head: Any = model.lm_head
    logits = head(rows).float()
    return functional.cross_entropy(logits, targets.long(), reduction="sum")


def ar_loss(model: nn.Module, ids: torch.Tensor, written: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Summed next-token NLL over the written tokens, and their count (causal attention)."""
    hidden = _hidden(model, ids)
    targets = written[:, 1:]
    return _nll(model, hidden[:, :-1][targets], ids[:, 1:][targets]), int(targets.sum())


def block_diffusion_mask(length: int, block: int, device: torch.device) -> torch.Tensor:
    """``[3L, 3L]`` True where a query (row) may attend a key (column): see the module."""
    position = torch.arange(3 * length, device=device)
    copy, index = position // length, (position % length) // block
    q_copy, k_copy = copy[:, None], copy[None, :]
    q_block, k_block = index[:, None], index[None, :]
    clean_key = k_copy == 0
    from_clean = (q_copy == 0) & clean_key & (k_block <= q_block)
    noisy = (q_copy > 0) & (
        (clean_key & (k_block < q_block)) | ((k_copy == q_copy) & (k_block == q_block))
    )
    return from_clean | noisy


def noisy_copies(
    ids: torch.Tensor, written: torch.Tensor, block: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[x | x_m | x_m̄]`` ``[B, 3L]`` and the masks ``[COPIES, B, L]``: per block a rate
    ``t ~ U(0, 1)``, each written token masked with probability ``t`` in the first copy and
    exactly when not in the second."""
    batch, length = ids.shape
    written = written.clone()
    written[:, 0] = False  # nothing before it to predict it from (a window starts with context)
    rate = torch.rand(batch, length // block, generator=generator).repeat_interleave(block, 1)
    draw = torch.rand(batch, length, generator=generator)
    first = written & (draw < rate).to(written.device)
    masks = torch.stack((first, written & ~first))
    copies = [ids.masked_fill(mask, MASK_ID) for mask in masks]
    return torch.cat((ids, *copies), dim=1), masks


def block_diffusion_loss(
    model: nn.Module,
    ids: torch.Tensor,
    written: torch.Tensor,
    block: int,
    generator: torch.Generator,
    allowed: torch.Tensor,
) -> tuple[torch.Tensor, int]:
    """Summed NLL of the masked tokens of both noisy copies, and their count. ``allowed``:
    :func:`block_diffusion_mask` for ``ids``' length (built once)."""
    length = ids.shape[1]
    sequence, masks = noisy_copies(ids, written, block, generator)
    positions = torch.arange(length, device=ids.device).repeat(1 + COPIES)[None]
    additive = torch.zeros(allowed.shape, dtype=_dtype(model), device=ids.device)
    additive.masked_fill_(~allowed, torch.finfo(additive.dtype).min)
    hidden = _hidden(model, sequence, position_ids=positions, attention_mask=additive[None, None])
    at = torch.arange(length, device=ids.device)
    rows, targets = [], []
    for copy, mask in enumerate(masks, start=1):
        # Token shift: position j from row j - 1, its block's first from the clean copy.
        source = torch.where(at % block == 0, at - 1, copy * length + at - 1)
        b, j = mask.nonzero(as_tuple=True)
        rows.append(hidden[b, source[j]])
        targets.append(ids[b, j])
    count = int(masks.sum())
    return _nll(model, torch.cat(rows), torch.cat(targets)), count


def _dtype(model: nn.Module) -> torch.dtype:
    return next(model.parameters()).dtype


def check_block_attention(model: nn.Module, block: int, device: torch.device) -> None:
    """Fail unless the network honours the block-diffusion mask (a transformers version that
    ignored a 4-D mask would train the wrong model without a word): a token changed in a
    later block leaves an earlier block's outputs alone, one in the same block does not."""
    length = 2 * block
    allowed = block_diffusion_mask(length, block, device)
    additive = torch.zeros(allowed.shape, dtype=_dtype(model), device=device)
    additive.masked_fill_(~allowed, torch.finfo(additive.dtype).min)
    positions = torch.arange(length, device=device).repeat(3)[None]
    ids = torch.arange(100, 100 + 3 * length, device=device)[None]

    def run(changed: int) -> torch.Tensor:
        tokens = ids.clone()
        tokens[0, changed] = MASK_ID
        with torch.no_grad():
            return _hidden(
                model, tokens, position_ids=positions, attention_mask=additive[None, None]
            )[0].float()

    base = run(length + block + 1)  # a noisy token of copy 1, block 1
    later = run(block)  # the clean copy's block 1
    same = run(1)  # the clean copy's block 0
    if not torch.allclose(base[:block], later[:block], atol=1e-3):
        raise RuntimeError("block-diffusion mask ignored: a later block changed an earlier one")
    if torch.allclose(base[0], same[0], atol=1e-6):
        raise RuntimeError("block-diffusion mask ignored: no attention within a block")
    if not torch.allclose(base[2 * length :], run(length + block + 2)[2 * length :], atol=1e-3):
        raise RuntimeError("block-diffusion mask ignored: one noisy copy sees the other")
