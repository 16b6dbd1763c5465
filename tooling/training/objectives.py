"""Training losses: next-token prediction (AR) and block diffusion (BD3-LM style).

Both are computed on agent turns only; user turns and the history are context. The diffusion
loss uses the two-copies layout ``[clean sequence | noisy agent blocks]``: a noisy block sees the
clean blocks before it and itself, never another noisy block, so one forward trains every
block of the sequence, each at its own noise level.

Predictions are shifted as in the AR model (the output at position *i* predicts token *i+1*),
for the diffusion model too: a block's first token is predicted from the last clean position
before it, the others from the noisy position before them. The AR weights therefore start
the diffusion model off already meaning "next token".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.nn import functional

from cadence.llm.dialogue_format import Role, TokenWindow
from cadence.llm.model import Transformer


@dataclass(frozen=True)
class Batch:
    ids: torch.Tensor
    """``[batch, tokens]``, right-padded with the pad id."""
    roles: torch.Tensor
    """``[batch, tokens]`` :class:`Role` values; batch padding is context."""
    lengths: torch.Tensor
    """``[batch]`` real lengths (whole blocks)."""


def collate(windows: Sequence[TokenWindow], pad_id: int) -> Batch:
    longest = max(len(w.ids) for w in windows)
    ids = torch.full((len(windows), longest), pad_id, dtype=torch.long)
    roles = torch.zeros((len(windows), longest), dtype=torch.long)
    for row, window in enumerate(windows):
        ids[row, : len(window.ids)] = torch.tensor(window.ids)
        roles[row, : len(window.roles)] = torch.tensor([int(r) for r in window.roles])
    lengths = torch.tensor([len(w.ids) for w in windows])
    return Batch(ids, roles, lengths)


@dataclass(frozen=True)
class LossResult:
    loss: torch.Tensor
    """What is minimised: mean over the predicted positions."""
    nll_sum: float
    """Negative log-likelihood (nats) of the agent text and end-of-turn tokens; for the
    diffusion model its ELBO bound."""
    tokens: int
    """Agent text and end-of-turn tokens counted in ``nll_sum``."""


def autoregressive_loss(model: Transformer, batch: Batch) -> LossResult:
    ids = batch.ids
    positions = torch.arange(ids.shape[1]).expand_as(ids)
    allowed = torch.ones(ids.shape[1], ids.shape[1], dtype=torch.bool).tril()[None, None]
    logits = model(ids, positions, allowed)
    targets = ids[:, 1:]
    predicted = batch.roles[:, 1:] == Role.REPLY
    nll = functional.cross_entropy(logits[:, :-1][predicted], targets[predicted], reduction="sum")
    count = int(predicted.sum())
    return LossResult(nll / max(count, 1), float(nll.detach()), count)


def block_diffusion_loss(
    model: Transformer,
    batch: Batch,
    mask_id: int,
    noise_range: tuple[float, float],
    generator: torch.Generator | None = None,
) -> LossResult:
    """Masks each agent block with its own rate ``t ~ U(noise_range)`` and weighs the cross
    entropy of each masked token by ``1/t`` (the ELBO weight of the linear schedule; clipping
    the range, as BD3-LM does, keeps that weight's variance down). With ``noise_range =
    (0, 1)`` the weighted sum is the ELBO bound on the NLL."""
    block_size = model.config.block_size
    ids, roles = batch.ids, batch.roles
    rows, length = ids.shape
    blocks = length // block_size
    block_of = torch.arange(length) // block_size

    # Which blocks belong to agent turns, gathered into the noisy copy.
    predicted = roles != Role.CONTEXT
    agent_blocks = predicted.view(rows, blocks, block_size).any(-1)
    per_row = agent_blocks.sum(-1)
    noisy_blocks = int(per_row.max())
    block_index = torch.zeros(rows, noisy_blocks, dtype=torch.long)
    block_valid = torch.arange(noisy_blocks)[None] < per_row[:, None]
    for row in range(rows):
        found = agent_blocks[row].nonzero().squeeze(-1)
        block_index[row, : len(found)] = found
    offsets = torch.arange(block_size)
    noisy_pos = (block_index[..., None] * block_size + offsets).view(rows, -1)
    token_valid = block_valid.repeat_interleave(block_size, dim=1)
    clean = ids.gather(1, noisy_pos)
    noisy_roles = roles.gather(1, noisy_pos)

    low, high = noise_range
    rates = low + (high - low) * torch.rand(rows, noisy_blocks, generator=generator)
    token_rates = rates.repeat_interleave(block_size, dim=1)
    masked = (torch.rand(clean.shape, generator=generator) < token_rates) & token_valid
    masked &= noisy_roles != Role.CONTEXT
    noisy = torch.where(masked, torch.full_like(clean, mask_id), clean)

    # Attention over [clean | noisy]; batch padding of the noisy copy gets block -1, so it
    # sees only itself and nothing real sees it.
    noisy_block_of = torch.where(token_valid, noisy_pos // block_size, -1)
    query_block = torch.cat((block_of.expand(rows, length), noisy_block_of), dim=1)
    is_noisy = torch.cat(
        (torch.zeros(rows, length, dtype=torch.bool), torch.ones_like(noisy, dtype=torch.bool)),
        dim=1,
    )
    qb, kb = query_block[:, :, None], query_block[:, None, :]
    qn, kn = is_noisy[:, :, None], is_noisy[:, None, :]
    allowed = torch.where(qn, torch.where(kn, kb == qb, kb < qb), ~kn & (kb <= qb)).unsqueeze(1)
    positions = torch.cat((torch.arange(length).expand(rows, length), noisy_pos), dim=1)
    logits = model(torch.cat((ids, noisy), dim=1), positions, allowed)

    # Shifted prediction: a block's first token from the clean position before the block,
    # the others from the noisy position before them.
    first_in_block = (torch.arange(noisy_pos.shape[1]) % block_size == 0)[None]
    source = torch.where(
        first_in_block, noisy_pos - 1, length + torch.arange(-1, noisy_pos.shape[1] - 1)[None]
    )
    source = source.clamp(min=0)
    predicted_logits = logits.gather(1, source.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
    token_nll = (
        functional.cross_entropy(predicted_logits[masked], clean[masked], reduction="none")
        / token_rates[masked]
    )
    loss = token_nll.sum() / max(
        int((noisy_roles != Role.CONTEXT).logical_and(token_valid).sum()), 1
    )
    is_text = noisy_roles[masked] == Role.REPLY
    return LossResult(
        loss,
        float(token_nll.detach()[is_text].sum()),
        int(((noisy_roles == Role.REPLY) & token_valid).sum()),
    )
