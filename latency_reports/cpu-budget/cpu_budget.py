"""``python latency_reports/cpu-budget/cpu_budget.py``: each model's job at 1 and 2 threads.

The thread budget (``threads``, docs/cpu-budget.md) starts from what a thread buys each
library on its own: a whisper decode of a short utterance, the Piper synthesis of a first
phrase, and a whole reply of the embedded generator — and what the first phrase costs with a
decode running beside it on another thread. Loads at 1, 4 and 8 calls (``cadence loadtest
-c``) then decide between budgets; this says why the candidates are what they are. Medians of
``--repeats`` runs, after one warm-up.

Measured once for docs/cpu-budget.md and kept beside its report (not part of any package or
the test suite); run from the repository root: ``.venv/bin/python
latency_reports/cpu-budget/cpu_budget.py [--repeats 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

from cadence.core.stats import median
from cadence.llm import Turn, load_local_generator
from cadence.pipeline.config import CadenceConfig, ThreadsConfig
from cadence.pipeline.model_loading import load_stt, load_tts
from cadence.tooling.bench.manifest import read_manifest
from cadence.voice.audio.wavfile import read_audio

MANIFEST = Path("tests/data/speech/manifest.jsonl")
CLIP_S = 3.0
"""Seconds of each clip decoded: a typical caller turn."""
FIRST_PHRASE = "Sure, I can help with that."
QUESTION = "I need a table for two at an Italian place tonight."


def _median_ms(job: Callable[[], object], repeats: int) -> float:
    job()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        job()
        times.append((time.perf_counter() - started) * 1000.0)
    return median(times)


def measure(threads: int, repeats: int, manifest: Path) -> dict[str, float]:
    """The median time of each job with every library on ``threads`` threads."""
    config = CadenceConfig()
    budget = ThreadsConfig(llm=threads, stt=threads, stt_workers=1, tts=threads)
    torch.set_num_threads(threads)
    transcriber = load_stt(config.models.stt, budget)
    synthesizer = load_tts(config.models.tts, budget)
    generator = load_local_generator(config.models.llm)
    clips = [read_audio(c.path, 16000)[: int(CLIP_S * 16000)] for c in read_manifest(manifest)]

    def decode() -> None:
        for clip in clips[:4]:
            transcriber.transcribe_blocking(clip)

    def reply() -> None:
        asyncio.run(generator.reply([Turn("user", QUESTION)]))

    def first_phrase() -> None:
        list(synthesizer.synthesize_blocking(FIRST_PHRASE))

    figures = {
        "whisper decode (3 s)": _median_ms(decode, repeats) / 4,
        "Piper first phrase": _median_ms(first_phrase, repeats),
        "dLLM whole reply": _median_ms(reply, repeats),
    }
    stop = threading.Event()

    def decoding() -> None:
        while not stop.is_set():
            decode()

    beside = threading.Thread(target=decoding, daemon=True)
    beside.start()
    try:
        figures["Piper first phrase, a decode beside"] = _median_ms(first_phrase, repeats)
    finally:
        stop.set()
        beside.join()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    args = parser.parse_args()
    rows = {threads: measure(threads, args.repeats, args.manifest) for threads in (1, 2)}
    print(f"| job (median of {args.repeats}) | 1 thread | 2 threads |")
    print("|---|---:|---:|")
    for job in rows[1]:
        print(f"| {job} | {rows[1][job]:.0f} ms | {rows[2][job]:.0f} ms |")


if __name__ == "__main__":
    main()
