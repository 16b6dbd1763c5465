"""Time to the first emitted piece through the open-weight generator, on the tiny models.

What Cadence's own machinery costs for an open-weight checkpoint between the turn engine
asking for a reply and the first words reaching TTS: rendering the ChatML prompt, prefilling
the new turn's blocks, the denoising steps up to the first word boundary (Fast-dLLM v2's
shifted sub-blocks, SDAR's blocks of 4), the worker-thread hop. The models are the tests'
tiny random-weight Fast-dLLM v2 and SDAR directories (tooling/bench/tiny_open_weights.py: 2 layers,
width 32, the real 151k vocabulary), built in a temporary directory with transformers (the
`dev` extra); a random model is never confident, so it commits about one token per step,
as a real model does only on hard text. No figure here says anything about a real 1.5B
checkpoint, which needs its weights and a GPU.

Each turn is a new user turn on the same conversation (its earlier turns stay cached, as in a
call); with ``--prefill`` the generator first prefills the history, as the turn engine does
while the caller speaks.

Torch runs on ``--threads`` CPU threads (1 by default): on the shared 2-core development
machine two threads spin against other work and make a tiny model's steps ten times slower.

Measured once for docs/llm.md ("Figure: time to the first emitted piece, tiny models, CPU") and
kept beside that figure's note in this folder (not part of any package or the test suite); the
tiny models it builds stay in the lab, ``cadence.tooling.bench.tiny_open_weights``, which the
tests import. Run from the repository root:

    python latency_reports/open-weights-first-piece/open_weights_first_piece.py \\
        [--turns 30] [--prefill] [--threads 1]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from cadence.core.stats import median, percentile
from cadence.llm import DecoderTurnGenerator, Turn, create_generator
from cadence.llm.options import LLMOptions
from cadence.tooling.bench import tiny_open_weights as tiny


async def first_piece_ms(
    directory: Path, block_size: int, turns: int, prefill: bool
) -> tuple[list[float], list[float], list[float]]:
    """Per turn after a warm-up one: milliseconds to the first piece, to the whole reply, and
    denoising steps per block."""
    config = LLMOptions(
        checkpoint=str(directory),
        block_size=block_size,
        confidence_threshold=0.9,
        max_reply_tokens=32,
        history_turns=6,
        max_context_tokens=1024,
    )
    generator = create_generator(config)
    assert isinstance(generator, DecoderTurnGenerator)
    history: list[Turn] = []
    first, whole, steps = [], [], []
    for turn in range(turns + 1):
        if prefill:
            await generator.prefill(history)
        history.append(Turn("user", tiny.TEXTS[turn % len(tiny.TEXTS)]))
        started = time.perf_counter()
        stream = generator.stream(history)
        await anext(stream)
        first_ms = 1000 * (time.perf_counter() - started)
        async for _piece in stream:  # the rest of the reply, as the engine would
            pass
        if turn:  # the first turn also loads the kernels and fills the system prompt's blocks
            first.append(first_ms)
            whole.append(1000 * (time.perf_counter() - started))
            stats = generator.last_stats
            steps.append(sum(stats.steps_per_block) / len(stats.steps_per_block))
        history.append(Turn("agent", generator.last_stats.text))
    return first, whole, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=30, help="timed turns per model")
    parser.add_argument("--prefill", action="store_true", help="prefill while 'the user speaks'")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print("$", " ".join([".venv/bin/python", *sys.argv]))
    print(
        f"CPU ({args.threads} thread(s)), float32; tiny random-weight models; "
        "max_reply_tokens 32, τ 0.9"
    )
    with tempfile.TemporaryDirectory() as scratch:
        for name, spec in tiny.SPECS.items():
            directory = Path(scratch) / name
            tiny.build(name, directory)
            first, whole, steps = asyncio.run(
                first_piece_ms(directory, spec.block_size, args.turns, args.prefill)
            )
            print(
                f"{name} (block {spec.block_size}): first piece median "
                f"{median(first):.1f} ms, p90 {percentile(first, 90):.1f} ms; "
                f"whole reply median {median(whole):.1f} ms; "
                f"{statistics.mean(steps):.1f} steps per block; {len(first)} turns"
            )


if __name__ == "__main__":
    main()
