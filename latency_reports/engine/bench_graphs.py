"""Times int8 graphs of the SmolLM2 network side by side: a decode step, blocks of 8 and 16,
and a prefill of 200 tokens, each over 200 cached positions where it has a cache, with 1 and
2 onnxruntime threads (medians of 6 after 2 warm-ups; docs/llm.md, "The engine").

    python latency_reports/engine/bench_graphs.py GRAPH.onnx [GRAPH.onnx …]
"""

from __future__ import annotations

import sys
import time

import numpy as np
import onnxruntime

from cadence.core.stats import median

LAYERS, KV_HEADS, HEAD_DIM = 30, 3, 64
CASES = {"step": (1, 200, 1), "b8": (8, 200, 8), "b16": (16, 200, 16), "prefill200": (200, 0, 1)}
"""name → (new tokens, cached positions, rows of logits)."""


def session(path: str, threads: int) -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def feeds(tokens: int, cached: int, rows: int) -> dict[str, np.ndarray]:
    random = np.random.default_rng(0)
    fed: dict[str, np.ndarray] = {
        "ids": random.integers(0, 1000, (1, tokens)).astype(np.int64),
        "positions": np.arange(cached, cached + tokens)[None].astype(np.int64),
        "bias": np.zeros((1, 1, tokens, cached + tokens), np.float32),
        "rows": np.arange(tokens - rows, tokens).astype(np.int64),
    }
    for layer in range(LAYERS):
        for kind in "kv":
            fed[f"past_{kind}_{layer}"] = random.standard_normal(
                (1, KV_HEADS, cached, HEAD_DIM)
            ).astype(np.float32)
    return fed


def main(paths: list[str]) -> None:
    for path in paths:
        for threads in (1, 2):
            graph = session(path, threads)
            for name, shape in CASES.items():
                fed, times = feeds(*shape), []
                for _ in range(8):
                    started = time.perf_counter()
                    graph.run(["logits"], fed)
                    times.append((time.perf_counter() - started) * 1000)
                print(f"{path}\t{threads} thread(s)\t{name}\t{median(times[2:]):.1f} ms")


if __name__ == "__main__":
    main(sys.argv[1:])
