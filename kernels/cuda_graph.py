"""Capturing a fixed-shape step in a CUDA graph, and the cache buckets that keep shapes fixed.

A decode step of a small model is a few dozen short kernels; on a GPU their launches and the
Python between them cost more than the arithmetic. A CUDA graph records the launches once and
replays them with one call. A graph replays fixed shapes on fixed buffers, so the step runs
over a cache padded to a bucket size (the attention masks the padding with per-sequence
lengths read on the device), and each bucket has its own graph. Powers of two from 64 keep
the buckets few (six up to 2,048 positions) and the padding under half.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import torch

SMALLEST_BUCKET = 64

Outputs = TypeVar("Outputs")


def bucket_length(length: int, smallest: int = SMALLEST_BUCKET) -> int:
    """Cache slots a step over ``length`` cached positions runs with: the smallest power of
    two that holds them, and at least ``smallest``."""
    if length < 0:
        raise ValueError(f"a cache cannot hold {length} positions")
    return max(smallest, 1 << max(length - 1, 0).bit_length())


class CapturedStep(Generic[Outputs]):
    """``step`` captured in a CUDA graph: it must read only tensors that stay in place (the
    caller writes the next inputs into them) and return tensors; :meth:`replay` reruns the
    recorded kernels and returns those same output tensors, overwritten.

    The step runs ``warmup`` times on a side stream before capture, which compiles the Triton
    kernels and lets PyTorch's allocator settle; capture forbids both.
    """

    def __init__(self, step: Callable[[], Outputs], warmup: int = 2) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("capturing a CUDA graph needs a CUDA device")
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                step()
        torch.cuda.current_stream().wait_stream(side)
        self._graph = torch.cuda.CUDAGraph()
        # thread_local: another session's decoder may launch work from its own thread while
        # this one captures; only this thread's calls must keep off the capturing stream.
        with torch.cuda.graph(self._graph, capture_error_mode="thread_local"):
            self._outputs = step()

    def replay(self) -> Outputs:
        self._graph.replay()
        return self._outputs
