"""Decoding through the kernel dispatcher commits the same tokens as before it existed.

The expected replies were recorded from the shipped diffusion checkpoint with the decoder as
it was before the commit step went through :func:`cadence.kernels.commit_decision` (commit 375d652):
three turns of one conversation, its KV cache carried across turns, at τ 0.7 (the default)
and 0.3 (many commits per step), with a clock that never runs late.
"""

from __future__ import annotations

from functools import cache, partial

import pytest
from prerequisites import requires

from cadence.core.clock import VirtualClock
from cadence.kernels.cuda_graph import bucket_length
from cadence.llm import graphed_decoder
from cadence.llm.block_diffusion import BlockDiffusionDecoder
from cadence.llm.checkpoint import EMBEDDED_DIR, LoadedModel, load_model
from cadence.llm.decoding import DecodingOptions, ReplyStats
from cadence.llm.dialogue import Turn
from cadence.llm.graphed_decoder import GraphedBlockDiffusionDecoder

USER_TURNS = (
    "Can you book me a table for two tonight?",
    "Somewhere in San Jose, Italian food please.",
    "What time does the flight to Chicago leave?",
)
RECORDED: dict[float, list[tuple[list[int], list[int]]]] = {
    0.7: [
        ([366, 531, 379, 275, 337, 282, 603, 274, 517, 35], [2, 2]),
        ([271, 557, 497, 873, 18, 477, 505, 313, 587, 1488, 2322, 307, 564, 752, 35], [5, 2, 1]),
        ([335, 532, 1588, 311, 543, 30, 1120, 429, 18], [3, 3]),
    ],
    0.3: [
        ([366, 531, 379, 531, 337, 282, 603, 274, 517, 35], [1, 2]),
        ([473, 381, 497, 873, 18, 477, 505, 313, 587, 1488, 2322, 307, 564, 752, 35], [1, 1, 1]),
        ([335, 532, 1588, 311, 543, 30, 1120, 429, 18], [1, 2]),
    ],
}

pytestmark = requires(
    (EMBEDDED_DIR / "dllm.pt").exists(), "needs the shipped checkpoint llm/checkpoints/dllm.pt"
)


@cache
def _shipped() -> LoadedModel:
    return load_model("embedded:dllm")


def _conversation(decoder: BlockDiffusionDecoder) -> list[tuple[list[int], list[int]]]:
    fmt = decoder.format
    history: list[Turn] = []
    replies = []
    for text in USER_TURNS:
        history.append(Turn("user", text))
        stats = ReplyStats()
        list(decoder.decode(fmt.prompt(history, history_turns=3, max_context_tokens=128), stats))
        replies.append((stats.token_ids, stats.steps_per_block))
        history.append(Turn("agent", stats.text))
    return replies


@pytest.mark.parametrize("threshold", sorted(RECORDED))
def test_the_dispatcher_decodes_the_recorded_replies(threshold: float) -> None:
    shipped = _shipped()
    options = DecodingOptions(confidence_threshold=threshold)
    decoder = BlockDiffusionDecoder(shipped.model, shipped.format, options, VirtualClock())
    assert _conversation(decoder) == RECORDED[threshold]


def test_the_fixed_shape_step_decodes_the_recorded_replies_across_buckets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The step a CUDA graph would replay, run eagerly: padded bucket buffers, block
    attention with per-sequence lengths, the device-side threshold. Buckets start at 16 here
    so that these short turns cross several."""
    monkeypatch.setattr(graphed_decoder, "bucket_length", partial(bucket_length, smallest=16))
    shipped = _shipped()
    options = DecodingOptions(confidence_threshold=0.7)
    decoder = GraphedBlockDiffusionDecoder(
        shipped.model, shipped.format, options, VirtualClock(), capture=False
    )
    buckets: list[int] = []
    run = decoder._run

    def recording(slots: int) -> object:
        buckets.append(slots)
        return run(slots)

    monkeypatch.setattr(decoder, "_run", recording)
    assert _conversation(decoder) == RECORDED[0.7]
    assert {16, 32, 64} <= set(buckets)  # the cache outgrew its buckets on the way
