"""The Triton kernels against their PyTorch references, run by Triton's interpreter on CPU
tensors (``TRITON_INTERPRET=1``), and a whole reply decoded through them.

Triton reads ``TRITON_INTERPRET`` when ``@triton.jit`` wraps a kernel, that is when
``kernels.triton_*`` is imported: so it is set here, before those imports, and nothing else in
the test process imports them (the dispatcher does so lazily, on CUDA or when forced).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

os.environ["TRITON_INTERPRET"] = "1"

import llm_tiny
import pytest
import torch
from prerequisites import missing

try:
    import triton  # type: ignore[import-untyped]  # noqa: F401 (is it there?)
except ImportError:
    missing("needs Triton (pip install -e '.[dev]' installs it)")

from cadence import kernels
from cadence.core.clock import VirtualClock
from cadence.kernels.commit_reference import commit_reference
from cadence.kernels.dispatch import banned_mask
from cadence.kernels.reference import block_attention_reference
from cadence.kernels.triton_attention import block_attention_triton
from cadence.kernels.triton_commit import MAX_CHUNKS, VOCAB_CHUNK, chunk_size, commit_triton
from cadence.llm.block_diffusion import BlockDiffusionDecoder
from cadence.llm.decoding import DecodingOptions, ReplyStats
from cadence.llm.dialogue import Turn
from cadence.llm.graphed_decoder import GraphedBlockDiffusionDecoder
from cadence.llm.open_weights import FAST_DLLM_V2, SDAR, Family
from cadence.llm.open_weights.decoder import never_predicted
from cadence.tooling.bench import tiny_open_weights as tiny

NEG_INF = float("-inf")


def test_the_kernels_run_in_the_interpreter() -> None:
    from triton.runtime.interpreter import InterpretedFunction  # type: ignore[import-untyped]

    from cadence.kernels import triton_attention, triton_commit

    assert isinstance(triton_commit._partial_kernel, InterpretedFunction)
    assert isinstance(triton_commit._decide_kernel, InterpretedFunction)
    assert isinstance(triton_attention._block_attention_kernel, InterpretedFunction)


# --- block attention ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("heads", "kv_heads", "block", "dim", "slots", "lengths"),
    [
        (4, 4, 8, 16, 64, [64, 0, 37]),  # full, empty and ragged caches
        (4, 2, 8, 16, 40, [33, 7]),  # GQA 2:1, slots not a multiple of the key chunk
        (8, 1, 5, 12, 20, [20, 3]),  # GQA 8:1 (multi-query), odd block and head size
        (2, 2, 3, 8, 0, [0, 0]),  # no cache at all: the block sees only itself
    ],
)
def test_block_attention_matches_the_reference(
    heads: int, kv_heads: int, block: int, dim: int, slots: int, lengths: list[int]
) -> None:
    torch.manual_seed(0)
    batch = len(lengths)
    q = torch.randn(batch, heads, block, dim)
    k = torch.randn(batch, kv_heads, slots + block, dim)
    v = torch.randn(batch, kv_heads, slots + block, dim)
    for b, length in enumerate(lengths):  # padding slots hold what would dominate if seen
        k[b, :, length:slots] = 1e4
        v[b, :, length:slots] = 1e4
    cache_lengths = torch.tensor(lengths)
    expected = block_attention_reference(q, k, v, cache_lengths)
    got = block_attention_triton(q, k, v, cache_lengths)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_block_attention_reads_strided_views() -> None:
    """The decode step passes views of bucket buffers, not contiguous tensors."""
    torch.manual_seed(1)
    buffer = torch.randn(1, 2, 40, 16)
    k, v = buffer[:, :, :24], buffer.flip(2)[:, :, :24]
    q = torch.randn(1, 4, 8, 16).transpose(1, 2).contiguous().transpose(1, 2)
    lengths = torch.tensor([11])
    torch.testing.assert_close(
        block_attention_triton(q, k, v, lengths), block_attention_reference(q, k, v, lengths)
    )


def test_block_attention_refuses_heads_that_do_not_group() -> None:
    q, k = torch.zeros(1, 3, 4, 8), torch.zeros(1, 2, 4, 8)
    with pytest.raises(ValueError, match="3 query heads"):
        block_attention_triton(q, k, k, torch.tensor([0]))


# --- the commit step ---------------------------------------------------------------------


def _commit_inputs(
    batch: int, block: int, vocab: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, block, vocab, generator=generator) * 4
    masked = torch.rand(batch, block, generator=generator) > 0.3
    masked[:, 0] = True  # every sequence has a masked position
    return logits, masked


@pytest.mark.parametrize("threshold", [0.0, 0.05, 0.3, 1.0])
@pytest.mark.parametrize(
    ("batch", "block", "vocab"),
    [(2, 8, 400), (3, 5, VOCAB_CHUNK * 2 + 37), (1, 1, 7), (1, 16, VOCAB_CHUNK)],
)
def test_commit_matches_the_reference(batch: int, block: int, vocab: int, threshold: float) -> None:
    logits, masked = _commit_inputs(batch, block, vocab, seed=vocab + block)
    banned, ends = torch.tensor([1, 3, 4]), torch.tensor([2, 0])
    on_device = torch.tensor([threshold])
    expected = commit_reference(logits, masked, on_device, banned, ends)
    got = commit_triton(logits, masked, on_device, banned_mask(banned, vocab), ends)
    assert torch.equal(got.commit, expected.commit)
    assert torch.equal(got.prediction, expected.prediction)
    torch.testing.assert_close(got.confidence, expected.confidence)


def test_commit_is_safe_on_lanes_that_see_only_minus_inf() -> None:
    logits, masked = _commit_inputs(2, 8, VOCAB_CHUNK + 10, seed=3)
    logits[0, 2] = NEG_INF  # a whole row
    logits[1, :, :VOCAB_CHUNK] = NEG_INF  # a whole first chunk of every row
    logits[1, 4] = NEG_INF
    masked[:, 2] = masked[1, 4] = True
    banned, ends = torch.tensor([VOCAB_CHUNK + 3]), torch.tensor([2])
    mask = banned_mask(banned, VOCAB_CHUNK + 10)
    got = commit_triton(logits, masked, torch.tensor([0.5]), mask, ends)
    expected = commit_reference(logits, masked, torch.tensor([0.5]), banned, ends)
    assert not got.confidence.isnan().any()
    assert got.confidence[0, 2] == got.confidence[1, 4] == 0
    assert not got.commit[0, 2]
    assert not got.commit[1, 4]
    assert torch.equal(got.commit, expected.commit)
    assert torch.equal(got.prediction, expected.prediction)
    torch.testing.assert_close(got.confidence, expected.confidence)


def test_commit_holds_an_end_of_turn_until_its_left_is_committed() -> None:
    logits = torch.full((1, 4, 10), -5.0)
    logits[0, :, 2] = torch.tensor([0.0, 0.0, 9.0, 9.0])  # positions 2, 3 sure of <eot> (2)
    logits[0, 0, 7] = logits[0, 1, 8] = 1.0  # positions 0, 1 unsure of words
    masked = torch.ones(1, 4, dtype=torch.bool)
    ends, banned = torch.tensor([2]), banned_mask(torch.tensor([5]), 10)
    got = commit_triton(logits, masked, torch.tensor([0.9]), banned, ends)
    assert got.commit.tolist() == [[True, False, False, False]]  # the most confident word
    masked[0, :2] = False
    got = commit_triton(logits, masked, torch.tensor([0.9]), banned, ends)
    assert got.commit.tolist() == [[False, False, True, False]]  # now <eot> may commit


QWEN_VOCAB = 151_936
"""Rows of the families' output heads (Qwen2.5-1.5B, Qwen3-1.7B)."""


def _family_banned(family: Family, tokenizer_ids: Sequence[int]) -> torch.Tensor:
    """The banned mask as the decoder builds it, for a tokenizer that knows ``tokenizer_ids``."""
    return never_predicted(QWEN_VOCAB, tokenizer_ids, family.mask_id)


@pytest.mark.parametrize(
    ("family", "block", "tokenizer", "threshold"),
    [
        # The published tokenizers number every id up to the mask: 272 (Fast-dLLM v2) and
        # 268 (SDAR) ids of the padded vocabulary are banned. A block of 32 is what the
        # graphed decoder decides over (Fast-dLLM v2's sub-blocks are a window inside it).
        # One τ per case (the interpreter is slow): some commit, all commit, only the best.
        (FAST_DLLM_V2, 32, "published", 0.5),
        (SDAR, 4, "published", 0.0),
        # The tests' and the GPU bench's tokenizer knows a few hundred ids: 151,6xx banned.
        (SDAR, 4, "tiny", 1.0),
    ],
)
def test_commit_at_the_real_vocabulary_with_the_families_banned_ids(
    family: Family, block: int, tokenizer: str, threshold: float
) -> None:
    if tokenizer == "published":
        known: Sequence[int] = range(family.mask_id + 1)
    else:
        vocab = json.loads(tiny.tokenizer_json(family))["model"]["vocab"]
        known = sorted(vocab.values())
    banned = _family_banned(family, known)
    assert int(banned.sum()) == (
        {"Fast-dLLM v2": 272, "SDAR": 268}[family.name]
        if tokenizer == "published"
        else QWEN_VOCAB - len(known) + 2
    )
    logits, masked = _commit_inputs(1, block, QWEN_VOCAB, seed=block)
    logits[0, :, 151_645] += 6.0  # the end of a turn is likely, and held by the guard
    ends = torch.tensor([151_645, 151_643])
    on_device = torch.tensor([threshold])
    expected = commit_reference(logits, masked, on_device, banned, ends)
    got = commit_triton(logits, masked, on_device, banned, ends)
    assert torch.equal(got.commit, expected.commit)
    assert torch.equal(got.prediction, expected.prediction)
    # Over 151,936 logits the reference's float32 softmax drifts by up to ~2e-5 of the
    # value; the kernel's online sum stays within 1e-6 of the float64 truth.
    torch.testing.assert_close(got.confidence, expected.confidence, rtol=5e-5, atol=1e-7)
    exact = logits.double().masked_fill(banned, NEG_INF).softmax(-1).max(-1).values
    torch.testing.assert_close(got.confidence.double(), exact, rtol=1e-6, atol=1e-9)
    assert not banned[got.prediction].any()
    assert got.commit.any()
    if threshold == 1.0:  # nothing is that sure: the most confident position alone
        assert int(got.commit.sum()) == 1


def test_the_dispatcher_gives_the_kernel_ids_as_a_mask() -> None:
    logits, masked = _commit_inputs(2, 8, 300, seed=5)
    ids, ends = torch.tensor([7, 11, 250]), torch.tensor([2])
    logits[:, :, 11] = 50.0  # a banned id would win everywhere
    with kernels.use_backend("triton"):
        got = kernels.commit_decision(logits, masked, 0.3, ids, ends)
    expected = commit_reference(logits, masked, 0.3, ids, ends)
    assert torch.equal(got.prediction, expected.prediction)
    assert torch.equal(got.commit, expected.commit)
    assert not torch.isin(got.prediction, ids).any()


def test_a_huge_vocabulary_takes_larger_chunks_not_more() -> None:
    assert chunk_size(QWEN_VOCAB) == VOCAB_CHUNK
    assert -(-(10**7) // chunk_size(10**7)) <= MAX_CHUNKS


# --- a whole reply through the dispatcher ------------------------------------------------

HISTORY = [
    Turn("user", "I would like to book a table for two in San Jose."),
    Turn("agent", "Sure, what time would you like the table?"),
    Turn("user", "At seven in the evening, please."),
]


@pytest.mark.parametrize("threshold", [1.0, 0.3])
def test_decoding_with_the_triton_kernels_commits_the_same_tokens(threshold: float) -> None:
    prompt = llm_tiny.dialogue_format().prompt(HISTORY, history_turns=3, max_context_tokens=64)
    options = DecodingOptions(confidence_threshold=threshold, max_reply_tokens=15)
    model, fmt = llm_tiny.model("block_causal"), llm_tiny.dialogue_format()
    expected = ReplyStats()
    list(BlockDiffusionDecoder(model, fmt, options, VirtualClock()).decode(prompt, expected))
    got = ReplyStats()
    decoder = GraphedBlockDiffusionDecoder(model, fmt, options, VirtualClock(), capture=False)
    with kernels.use_backend("triton"):
        list(decoder.decode(prompt, got))
    assert got.token_ids == expected.token_ids
    assert got.steps_per_block == expected.steps_per_block
    assert len(got.steps_per_block) > 1  # more than one block: the in-block steps ran
