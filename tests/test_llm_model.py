"""Attention masks against dense references, and the KV cache against full recomputation."""

from __future__ import annotations

import llm_tiny
import pytest
import torch

from cadence.llm.attention_masks import step_mask, visibility
from cadence.llm.model import AttentionMode


def _dense_block_causal(length: int, block_size: int) -> torch.Tensor:
    mask = torch.zeros(length, length, dtype=torch.bool)
    for query in range(length):
        block_end = (query // block_size + 1) * block_size
        for key in range(min(block_end, length)):
            mask[query, key] = True
    return mask


@pytest.mark.parametrize(("length", "block_size"), [(12, 4), (13, 4), (9, 1), (8, 8)])
def test_block_causal_mask_equals_a_dense_reference(length: int, block_size: int) -> None:
    positions = torch.arange(length)
    got = visibility(positions, positions, "block_causal", block_size)
    assert torch.equal(got, _dense_block_causal(length, block_size))


def test_causal_mask_is_lower_triangular() -> None:
    positions = torch.arange(7)
    assert torch.equal(
        visibility(positions, positions, "causal", 4), torch.ones(7, 7, dtype=torch.bool).tril()
    )


def test_block_outputs_see_their_whole_block_and_nothing_later() -> None:
    """Changing the last token of block 1 changes every output of block 1 (bidirectional
    inside the block) and no output of block 0 (causal across blocks)."""
    model = llm_tiny.model("block_causal", block_size=4)
    ids = torch.randint(5, model.config.vocab_size, (1, 12))
    changed = ids.clone()
    changed[0, 7] = (ids[0, 7] + 1) % model.config.vocab_size
    positions = torch.arange(12)[None]
    mask = visibility(positions, positions, "block_causal", 4)[:, None]
    before, after = model(ids, positions, mask), model(changed, positions, mask)
    torch.testing.assert_close(before[:, :4], after[:, :4])
    assert ((before[0, 4:8] - after[0, 4:8]).abs().amax(-1) > 1e-6).all()


@pytest.mark.parametrize("attention", ["causal", "block_causal"])
def test_cached_forward_equals_full_forward(attention: str) -> None:
    mode: AttentionMode = "causal" if attention == "causal" else "block_causal"
    model = llm_tiny.model(mode, block_size=4)
    ids = torch.randint(5, model.config.vocab_size, (1, 16))
    positions = torch.arange(16)[None]
    full = model(ids, positions, visibility(positions, positions, mode, 4)[:, None])
    cache = model.new_cache()
    pieces = []
    for start, end in ((0, 8), (8, 12), (12, 16)):
        mask = step_mask(start, end - start, mode, 4)
        pieces.append(model(ids[:, start:end], positions[:, start:end], mask, cache))
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-4)
    assert cache.length == 16


def test_positions_beyond_keep_stay_out_of_the_cache() -> None:
    model = llm_tiny.model("block_causal", block_size=4)
    cache = model.new_cache()
    ids = torch.randint(5, model.config.vocab_size, (1, 8))
    model(ids, torch.arange(8)[None], step_mask(0, 8, "block_causal", 4), cache, keep=4)
    assert cache.length == 4
    cache.truncate(0)
    assert cache.length == 0
