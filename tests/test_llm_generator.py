"""The async interface the pipeline consumes, for both backends, and the shipped checkpoints."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import llm_tiny
import pytest
import torch
from prerequisites import requires

from cadence.core.clock import VirtualClock
from cadence.llm import (
    AutoregressiveTurnGenerator,
    DecoderTurnGenerator,
    DiffusionTurnGenerator,
    GeneratorOptions,
    ReplyPiece,
    ReplyStats,
    Turn,
    load_local_generator,
)
from cadence.llm.block_diffusion import BlockDiffusionDecoder
from cadence.llm.checkpoint import EMBEDDED_DIR, CheckpointError, LoadedModel
from cadence.llm.decoding import DecodingOptions
from cadence.llm.graphed_decoder import GraphedBlockDiffusionDecoder
from cadence.llm.options import LLMOptions
from cadence.llm.result_slots import ReplyFacts

HISTORY = [
    Turn("user", "I'd like to find a restaurant in San Jose."),
    Turn("agent", "What kind of food would you like?"),
    Turn("user", "Italian, please."),
]
needs_shipped_checkpoints = requires(
    all((EMBEDDED_DIR / name).exists() for name in ("dllm.pt", "ar.pt")),
    "needs the shipped checkpoints llm/checkpoints/dllm.pt and ar.pt",
)
OPTIONS = GeneratorOptions(decoding=DecodingOptions(max_reply_tokens=9), max_context_tokens=64)


def _generators() -> list[DecoderTurnGenerator]:
    fmt = llm_tiny.dialogue_format()
    return [
        DiffusionTurnGenerator(
            LoadedModel(llm_tiny.model("block_causal"), fmt, {}), OPTIONS, VirtualClock()
        ),
        AutoregressiveTurnGenerator(
            LoadedModel(llm_tiny.model("causal"), fmt, {}), OPTIONS, VirtualClock()
        ),
    ]


@pytest.mark.parametrize("index", [0, 1], ids=["dllm", "ar"])
async def test_both_backends_stream_pieces_that_join_to_the_reply(index: int) -> None:
    generator = _generators()[index]
    pieces = [piece async for piece in generator.stream(HISTORY)]
    assert pieces
    assert "".join(p.text for p in pieces) == generator.last_stats.text
    assert len(generator.last_stats.token_ids) == 9


async def test_concurrent_turns_are_serialised_and_agree_with_sequential_ones() -> None:
    generator = _generators()[0]
    first, second = await asyncio.gather(generator.reply(HISTORY), generator.reply(HISTORY))
    assert first == second == await _generators()[0].reply(HISTORY)


async def test_prefill_while_the_user_speaks_leaves_only_their_turn() -> None:
    generator = _generators()[0]
    await generator.prefill(HISTORY[:2])
    await generator.reply(HISTORY)
    turn = llm_tiny.dialogue_format().encode_turn(HISTORY[2])
    assert generator.last_stats.prefilled_tokens == len(turn)


async def test_a_stream_abandoned_midway_leaves_the_generator_usable() -> None:
    generator = _generators()[0]
    stream = generator.stream(HISTORY)
    await anext(stream)
    await stream.aclose()
    assert await generator.reply(HISTORY) == await _generators()[0].reply(HISTORY)


@needs_shipped_checkpoints
@pytest.mark.parametrize("backend", ["dllm", "ar"])
async def test_shipped_checkpoint_answers_a_request(backend: str) -> None:
    config = LLMOptions(
        backend="dllm" if backend == "dllm" else "ar", checkpoint=f"embedded:{backend}"
    )
    generator = load_local_generator(config)
    reply = await generator.reply([Turn("user", "Can you book me a table for two tonight?")])
    assert reply.strip()
    assert generator.last_stats.steps_per_block


@needs_shipped_checkpoints
def test_a_checkpoint_that_does_not_fit_the_backend_is_refused() -> None:
    with pytest.raises(Exception, match=r"models\.llm\.checkpoint"):
        load_local_generator(LLMOptions(backend="dllm", checkpoint="embedded:ar"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_the_device_is_chosen_by_config_and_a_missing_gpu_is_named() -> None:
    with pytest.raises(CheckpointError, match=r"models\.llm\.device: cuda, but torch sees no"):
        load_local_generator(LLMOptions(device="cuda"))
    generator = load_local_generator(LLMOptions(device="auto"))  # no CUDA here: the CPU path
    assert isinstance(generator.decoder, BlockDiffusionDecoder)
    assert not isinstance(generator.decoder, GraphedBlockDiffusionDecoder)


async def test_a_cancelled_stream_finishes_its_step_before_the_next_reply_starts() -> None:
    """Barge-in cancels a reply while a decode step runs in a thread; the next reply must not
    touch the shared KV cache until that step is done."""
    generator = _generators()[0]
    decode = generator._decoder.decode
    log: list[str] = []

    def slow_decode(
        prompt: list[int],
        stats: ReplyStats | None = None,
        *,
        calls: bool = False,
        facts: ReplyFacts | None = None,
    ) -> Iterator[ReplyPiece]:
        for piece in decode(prompt, stats, calls=calls, facts=facts):
            log.append("step starts")
            time.sleep(0.05)  # a decode step long enough to be cancelled in the middle
            log.append("step ends")
            yield piece

    generator._decoder.decode = slow_decode  # type: ignore[method-assign]

    async def first_reply() -> None:
        async for _ in generator.stream(HISTORY):
            pass

    task = asyncio.create_task(first_reply())
    for _ in range(60_000):  # until a step is in its thread (a minute at most, however busy)
        if (log and log[-1] == "step starts") or task.done():
            break
        await asyncio.sleep(0.001)
    assert log, "no decode step started"
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert log[-1] == "step ends"  # the cancelled step ran to its end before the lock was freed
    generator._decoder.decode = decode  # type: ignore[method-assign]
    assert await generator.reply(HISTORY) == await _generators()[0].reply(HISTORY)
