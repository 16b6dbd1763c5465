"""The async interface the pipeline consumes, for both backends, and the shipped checkpoints."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

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
CORPUS_SAMPLE = Path(__file__).parent / "data" / "dialogue" / "sgd_tools_sample.jsonl"
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


GREEDY_REPLIES = {
    "dllm": "What type of food do you want?",
    "ar": "What kind of food do you want?",
}
"""The shipped checkpoints' greedy replies to the corpus sample's first user turn (SGD's
``sgd_train_1_00000``: "I am feeling hungry so I would like to find a place to eat."), read
off the checkpoints once (CPU torch, the same at 1 and 2 threads). Where the reference agent
asks back (its act is REQUEST: where to eat), they ask back too (what food)."""


@needs_shipped_checkpoints
@pytest.mark.parametrize("backend", ["dllm", "ar"])
async def test_shipped_checkpoint_answers_a_request(backend: str) -> None:
    first = json.loads(CORPUS_SAMPLE.read_text().splitlines()[0])
    opening, reference = first["turns"][:2]
    assert opening["speaker"] == "user"
    assert reference["acts"][0][0] == "REQUEST"  # the truth: the agent asks something back
    config = LLMOptions(
        backend="dllm" if backend == "dllm" else "ar", checkpoint=f"embedded:{backend}"
    )
    generator = load_local_generator(config)
    reply = await generator.reply([Turn("user", opening["text"])])
    assert reply == GREEDY_REPLIES[backend]
    assert reply.endswith("?")
    assert generator.last_stats.steps_per_block


@needs_shipped_checkpoints
def test_a_checkpoint_that_does_not_fit_the_backend_is_refused() -> None:
    with pytest.raises(Exception, match=r"models\.llm\.checkpoint"):
        load_local_generator(LLMOptions(backend="dllm", checkpoint="embedded:ar"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_the_device_is_chosen_by_config_and_a_missing_gpu_is_named() -> None:
    small = {"backend": "dllm", "checkpoint": "embedded:dllm"}
    with pytest.raises(CheckpointError, match=r"models\.llm\.device: cuda, but torch sees no"):
        load_local_generator(LLMOptions(device="cuda", **small))
    # No CUDA here: the CPU path.
    generator = load_local_generator(LLMOptions(device="auto", **small))
    assert isinstance(generator.decoder, BlockDiffusionDecoder)
    assert not isinstance(generator.decoder, GraphedBlockDiffusionDecoder)


async def test_a_cancelled_stream_finishes_its_step_before_the_next_reply_starts() -> None:
    """Barge-in cancels a reply while a decode step runs in a thread; the next reply must not
    touch the shared KV cache until that step is done."""
    generator = _generators()[0]
    decode = generator._decoder.decode
    log: list[str] = []
    loop, started, release = asyncio.get_running_loop(), asyncio.Event(), threading.Event()

    def held_decode(
        prompt: list[int],
        stats: ReplyStats | None = None,
        *,
        calls: bool = False,
        facts: ReplyFacts | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[ReplyPiece]:
        for piece in decode(prompt, stats, calls=calls, facts=facts, stop=stop):
            log.append("step starts")
            loop.call_soon_threadsafe(started.set)
            # The step lasts until the test lets it end: cancelled in its middle on any machine.
            assert release.wait(120), "the step was never let end"
            log.append("step ends")
            yield piece

    generator._decoder.decode = held_decode  # type: ignore[method-assign]

    async def first_reply() -> None:
        async for _ in generator.stream(HISTORY):
            pass

    task = asyncio.create_task(first_reply())
    await asyncio.wait_for(started.wait(), 60)  # a step is in its thread (a minute: a bound)
    assert log == ["step starts"]
    task.cancel()
    try:
        await settle()  # ample turns of the loop for a stream that let go of the lock to end
        assert not task.done()  # it waits for the step in its thread
    finally:
        release.set()
        await asyncio.gather(task, return_exceptions=True)
    assert log == ["step starts", "step ends"]  # the step ran to its end; no other began
    generator._decoder.decode = decode  # type: ignore[method-assign]
    assert await generator.reply(HISTORY) == await _generators()[0].reply(HISTORY)


async def settle() -> None:
    """Let every task that can run, run (a fixed number of loop turns, not of seconds)."""
    for _ in range(100):
        await asyncio.sleep(0)
