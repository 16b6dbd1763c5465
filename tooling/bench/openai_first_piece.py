"""Time to the first emitted piece through the `openai` backend, against the fake service.

What the backend itself adds between the turn engine asking for a reply and the first words
reaching TTS: building the request, HTTP on loopback, decoding the event stream, cutting at a
word boundary. The fake service (tooling/emulators/openai.py) answers at once, or after
``--service-delay-ms`` to stand for a real model's time to first token; a real service adds
its network round trip and its own first-token time on top. The first turn of a generator
opens the connection; later turns reuse it (keep-alive), and are reported apart.

Run: python -m cadence.tooling.bench.openai_first_piece [--turns 50] [--service-delay-ms 0]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

from cadence.core.stats import median, percentile
from cadence.llm import Turn
from cadence.llm.options import OpenAIOptions
from cadence.llm.remote import create_openai_generator
from cadence.tooling.emulators.openai import FakeOpenAI, Stream

KEY_ENV = "CADENCE_BENCH_OPENAI_KEY"
REPLY = ("Sure, ", "I can book ", "a table for two ", "at seven tonight.")
QUESTION = [Turn("user", "Can you book a table for two tonight?")]


async def first_piece_ms(turns: int, service_delay_ms: float) -> tuple[float, list[float]]:
    """Milliseconds to the first piece: of the first turn (a new connection) and of each
    later turn (the kept one)."""
    os.environ.setdefault(KEY_ENV, "bench-key")
    async with FakeOpenAI(default=Stream(REPLY, first_delay_s=service_delay_ms / 1000)) as fake:
        settings = OpenAIOptions(base_url=fake.base_url, model="bench", api_key_env=KEY_ENV)
        generator = create_openai_generator(settings)
        times = []
        try:
            for _ in range(turns + 1):
                started = time.perf_counter()
                stream = generator.stream(QUESTION)
                await anext(stream)
                times.append(1000 * (time.perf_counter() - started))
                async for _piece in stream:  # the rest of the reply, as the engine would
                    pass
        finally:
            await generator.aclose()
        assert fake.connections == 1, "later turns should reuse the connection"
    return times[0], times[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50, help="turns after the first")
    parser.add_argument("--service-delay-ms", type=float, default=0.0)
    args = parser.parse_args()
    cold, warm = asyncio.run(first_piece_ms(args.turns, args.service_delay_ms))
    print("$", " ".join([".venv/bin/python", *sys.argv]))
    print(f"fake service delay before the first token: {args.service_delay_ms:.0f} ms")
    print(f"first turn (new connection): {cold:.1f} ms to the first piece")
    print(
        f"next {len(warm)} turns (kept connection): median {median(warm):.1f} ms, "
        f"p95 {percentile(warm, 95):.1f} ms, min {min(warm):.1f} ms"
    )


if __name__ == "__main__":
    main()
