"""What the language model's end of turn costs a call: memory, CPU while the caller speaks,
and how soon P(end of turn) is there after a transcript.

Each clip's words (``words.jsonl``, their times in the recording) replay a call's work as
the turn engine does it (docs/end-of-turn.md): the context prefilled when the caller starts,
a live partial transcript every ``partials_interval_ms`` of speech (the words said by then, put
in the cache unscored), the speculative transcript at the pause (all the words, scored), and the
final transcript (the same words).
Each job's CPU time is read on the thread that runs it (``time.thread_time``), so the figures
hold on a busy machine; the wall time of the speculative score is the wait a caller's turn
could see. One model per process, as a server holds it.

Measured once for docs/end-of-turn.md ("Cost") and kept beside its report, ``cost.json`` (not
part of any package or the test suite); run from the repository root:

    python latency_reports/end-of-turn-lm/turn_end_cost.py --words tests/data/speech/words.jsonl \\
        --out latency_reports/end-of-turn-lm/cost.json
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import psutil

from cadence.core.stats import percentiles
from cadence.pipeline.config import CadenceConfig
from cadence.pipeline.model_loading import apply_thread_budget, load_turn_end_model
from cadence.report.files import write_report
from cadence.tooling.bench.pause_points import Word, read_words

T = TypeVar("T")
AGENT = "Thanks for calling. What can I do for you today?"
"""The agent's words before each clip (the clips answer nothing; a greeting is the usual)."""


def _timed(work: Callable[[], T]) -> tuple[T, float, float]:
    """``work()``, its CPU ms on this thread and its wall ms."""
    cpu, wall = time.thread_time(), time.perf_counter()
    result = work()
    return result, 1000 * (time.thread_time() - cpu), 1000 * (time.perf_counter() - wall)


def replay_call(
    scorer: Any, words: Sequence[Word], partials_interval_ms: float
) -> dict[str, float]:
    """One call's end-of-turn work on ``words``; CPU and wall ms per kind of job."""
    session = scorer.session()
    _, prefill_cpu, _ = _timed(lambda: session.prefill(AGENT))
    partial_cpu = 0.0
    partials = 0
    speech_ms = 1000 * words[-1].end_s
    at = partials_interval_ms
    while at < speech_ms:
        said = " ".join(w.text for w in words if w.end_s * 1000 <= at)
        if said:
            _, cpu, _ = _timed(functools.partial(session.extend, said, AGENT))
            partial_cpu += cpu
            partials += 1
        at += partials_interval_ms
    text = " ".join(w.text for w in words)
    _, speculative_cpu, speculative_wall = _timed(lambda: session.probability(text, AGENT))
    _, final_cpu, final_wall = _timed(lambda: session.probability(text, AGENT))
    total = prefill_cpu + partial_cpu + speculative_cpu + final_cpu
    return {
        "speech_ms": speech_ms,
        "partials": partials,
        "prefill_cpu_ms": prefill_cpu,
        "partials_cpu_ms": partial_cpu,
        "speculative_cpu_ms": speculative_cpu,
        "speculative_wall_ms": speculative_wall,
        "final_wall_ms": final_wall,
        "cpu_ms": total,
        "cpu_share_of_one_core": total / speech_ms,
    }


def measure(words_path: Path, config: CadenceConfig, repeats: int) -> dict[str, Any]:
    process = psutil.Process()
    before = process.memory_full_info().uss  # private memory: shared libraries aside
    apply_thread_budget(config.threads)
    started = time.perf_counter()
    scorer = load_turn_end_model(config.models.lm)
    load_s = time.perf_counter() - started
    after = process.memory_full_info().uss
    clips = read_words(words_path)
    calls = [
        replay_call(scorer, words, config.models.stt.partials_interval_ms or 1000.0)
        for _ in range(repeats)
        for words in clips.values()
        if words
    ]
    after_calls = process.memory_full_info().uss

    def column(name: str) -> list[float]:
        return [call[name] for call in calls]

    return {
        "model": scorer.model.name,
        "precision": config.models.lm.precision,
        "network": type(scorer.model.network).__name__,
        "threads": config.threads.llm,
        "load_s": round(load_s, 2),
        "private_memory_added_mb": round((after - before) / 2**20, 1),
        "private_memory_added_after_calls_mb": round((after_calls - before) / 2**20, 1),
        "calls": len(calls),
        "speculative_wall_ms": percentiles(column("speculative_wall_ms")),
        "speculative_cpu_ms": percentiles(column("speculative_cpu_ms")),
        "final_wall_ms": percentiles(column("final_wall_ms")),
        "cpu_ms_per_call": percentiles(column("cpu_ms")),
        "cpu_share_of_one_core": percentiles(column("cpu_share_of_one_core")),
        "cpu_share_of_one_core_overall": float(
            np.sum(column("cpu_ms")) / np.sum(column("speech_ms"))
        ),
        "per_call": calls,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--words", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    result = measure(args.words, CadenceConfig(), args.repeats)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_report(args.out.parent, {args.out.name: result})
    summary = {k: v for k, v in result.items() if k != "per_call"}
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
