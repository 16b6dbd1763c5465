"""Chooses the implementation of each kernel for the device the tensors live on.

CUDA tensors take the Triton kernels when Triton is installed (the commit step: whichever of
Triton and the reference a measurement at the shape's first call found faster); every other
device takes the PyTorch reference, so CPU behaviour is the reference's, bit for bit. The
Triton modules are imported on first use only: importing Triton costs about a second, and it
is an optional dependency. :func:`use_backend` overrides the choice, which is how the tests
and the bench run the Triton kernels on CPU tensors under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cache, partial
from typing import Literal

import torch

from cadence.kernels.commit_reference import CommitDecision, commit_reference
from cadence.kernels.reference import attention_reference, block_attention_reference

Backend = Literal["reference", "triton"]

_forced: ContextVar[Backend | None] = ContextVar("kernels_backend", default=None)


@dataclass(frozen=True)
class CachedBlock:
    """The visibility of a decode step on a padded cache, given to :func:`attention` in place
    of a dense mask: the queries are the current block; the keys are cache slots, of which
    the first ``cache_lengths[b]`` are valid, followed by the block itself (see
    :func:`cadence.kernels.reference.block_attention_reference`). Its shapes do not depend on the
    cache length, which is what lets a CUDA graph replay the step as the cache grows."""

    cache_lengths: torch.Tensor


@cache
def triton_installed() -> bool:
    """Looked up once: a module search on every call cost the commit step several
    microseconds (the GPU bench's dispatched rows were 5–7 % over the Triton kernel)."""
    return importlib.util.find_spec("triton") is not None


def backend(device: torch.device) -> Backend:
    """The implementation used for tensors on ``device``."""
    forced = _forced.get()
    if forced is not None:
        return forced
    return "triton" if device.type == "cuda" and triton_installed() else "reference"


@contextmanager
def use_backend(name: Backend) -> Iterator[None]:
    """Run every kernel with ``name`` whatever the tensors' device, inside the block."""
    token = _forced.set(name)
    try:
        yield
    finally:
        _forced.reset(token)


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | CachedBlock | None
) -> torch.Tensor:
    """Attention of ``q`` over ``k``/``v``. A dense boolean ``allowed`` mask (or ``None``)
    takes SDPA on every device (see :func:`cadence.kernels.reference.attention_reference` for
    shapes); a :class:`CachedBlock` takes :func:`block_attention`."""
    if isinstance(allowed, CachedBlock):
        return block_attention(q, k, v, allowed.cache_lengths)
    return attention_reference(q, k, v, allowed)


def block_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache_lengths: torch.Tensor
) -> torch.Tensor:
    """The current block's attention over a padded cache plus itself (contract:
    :func:`cadence.kernels.reference.block_attention_reference`)."""
    if backend(q.device) == "triton":
        from cadence.kernels.triton_attention import block_attention_triton

        return block_attention_triton(q, k, v, cache_lengths)
    return block_attention_reference(q, k, v, cache_lengths)


def banned_mask(banned: torch.Tensor, vocab: int) -> torch.Tensor:
    """``banned`` as the boolean mask ``[vocab]`` the Triton kernel reads: a mask as it is,
    int64 ids scattered into one (two small launches, graph-safe: the ids stay on the
    device, so a tensor changed in place between replays is read anew)."""
    if banned.dtype == torch.bool:
        return banned
    mask = torch.zeros(vocab, dtype=torch.bool, device=banned.device)
    return mask.index_fill_(0, banned, True)


COMMIT_TIMING_RUNS = 5
"""Timed calls of each implementation when a commit shape is first seen on a GPU."""
_commit_choice: dict[tuple[object, ...], Backend] = {}
"""The faster commit implementation per (shape, dtype, device), as measured there."""


def commit_decision(
    logits: torch.Tensor,
    masked: torch.Tensor,
    threshold: float | torch.Tensor,
    banned: torch.Tensor,
    ends: torch.Tensor,
) -> CommitDecision:
    """One denoising step's decision for ``logits`` ``[batch, block, vocab]`` (contract:
    :func:`cadence.kernels.commit_reference.commit_reference`). ``threshold`` may live on the device
    (a one-element tensor), so that a captured step reads the current τ at every replay;
    ``banned`` is int64 ids or a boolean mask of the vocabulary.

    On CUDA the rule is measured, not assumed: the first call at a shape (outside a graph
    capture) times the Triton kernel and the reference on its own inputs and keeps the faster
    for that shape; the two agree (tests/test_kernels_triton.py), so the choice changes the
    time, not the decision. A forced backend (:func:`use_backend`) is taken as it is."""
    chosen = backend(logits.device)
    if not isinstance(threshold, torch.Tensor) and chosen == "triton":
        threshold = torch.full((1,), threshold, dtype=torch.float32, device=logits.device)
    if chosen == "reference" or _forced.get() is not None:
        return _commit_with(logits, masked, threshold, banned, ends, chosen)
    key = (tuple(logits.shape), logits.dtype, logits.device, banned.dtype)
    choice = _commit_choice.get(key)
    if choice is None:
        run = partial(_commit_with, logits, masked, threshold, banned, ends)
        if torch.cuda.is_current_stream_capturing():
            return run("triton")
        choice = _commit_choice[key] = _faster(run)
    return _commit_with(logits, masked, threshold, banned, ends, choice)


def _commit_with(
    logits: torch.Tensor,
    masked: torch.Tensor,
    threshold: float | torch.Tensor,
    banned: torch.Tensor,
    ends: torch.Tensor,
    name: Backend,
) -> CommitDecision:
    if name == "triton":
        from cadence.kernels.triton_commit import commit_triton

        assert isinstance(threshold, torch.Tensor)
        mask = banned_mask(banned, logits.shape[-1])
        return commit_triton(logits, masked, threshold, mask, ends)
    return commit_reference(logits, masked, threshold, banned, ends)


def _faster(run: Callable[[Backend], CommitDecision]) -> Backend:
    """The implementation whose median of :data:`COMMIT_TIMING_RUNS` calls (after one
    warm-up, which also compiles the kernel) is lower, timed with CUDA events."""
    medians: dict[Backend, float] = {}
    for name in ("triton", "reference"):
        run(name)
        times = []
        for _ in range(COMMIT_TIMING_RUNS):
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            run(name)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        medians[name] = sorted(times)[len(times) // 2]
    return "triton" if medians["triton"] <= medians["reference"] else "reference"


def commit_choices() -> dict[tuple[object, ...], Backend]:
    """What the measured rule chose so far, per (shape, dtype, device, banned dtype)."""
    return dict(_commit_choice)
