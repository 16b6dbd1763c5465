"""How soon a cancelled reply lets go: the shipped AR adapter on the int8 graph writes a reply,
its reader is cancelled mid-decode (as a barge-in, ``llm_timeout_ms`` or a hang-up cancels it),
and the time from the cancellation to the generator's lock being free is taken, 20 times
(docs/llm.md, "The engine").

    python latency_reports/engine/stop_latency.py
"""

from __future__ import annotations

import asyncio
import time

import torch

from cadence.core.stats import median, percentile
from cadence.llm import Turn
from cadence.llm.adapted_decoding import AdaptedARDecoder, adapted_generators
from cadence.llm.options import LLMOptions

HISTORY = [Turn("user", "Tell me about the hotels you can find me in New York next week.")]


async def once(step_ms: list[float]) -> float:
    generator = adapted_generators(
        LLMOptions(backend="ar", checkpoint="embedded:smollm2-ar"), torch.device("cpu")
    )(None)
    decoder = generator.decoder
    assert isinstance(decoder, AdaptedARDecoder)
    step = decoder._next_token
    steps = 0
    started = asyncio.Event()
    loop = asyncio.get_running_loop()

    def timed(pending: list[int]) -> int:
        nonlocal steps
        begun = time.perf_counter()
        token = step(pending)
        step_ms.append((time.perf_counter() - begun) * 1000)
        steps += 1
        if steps == 4:
            loop.call_soon_threadsafe(started.set)
        return token

    decoder._next_token = timed  # type: ignore[method-assign]

    async def read() -> None:
        async for _ in generator.stream(HISTORY):
            pass

    task = asyncio.create_task(read())
    await started.wait()
    cancelled = time.perf_counter()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    async with generator._lock:  # free: the next reply may start
        return (time.perf_counter() - cancelled) * 1000


async def main() -> None:
    step_ms: list[float] = []
    waits = [await once(step_ms) for _ in range(20)]
    print(
        f"cancel to free: median {median(waits):.1f} ms, p95 {percentile(waits, 95):.1f} ms, "
        f"max {max(waits):.1f} ms; a decode step: median {median(step_ms):.1f} ms"
    )


if __name__ == "__main__":
    asyncio.run(main())
