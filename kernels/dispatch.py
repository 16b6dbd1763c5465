"""Chooses the implementation of each kernel for the device the tensors live on.

CUDA tensors take the Triton kernels when Triton is installed; every other device takes the
PyTorch reference, so CPU behaviour is the reference's, bit for bit. The Triton modules are
imported on first use only: importing Triton costs about a second, and it is an optional
dependency. :func:`use_backend` overrides the choice, which is how the tests and the bench run
the Triton kernels on CPU tensors under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
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


def triton_installed() -> bool:
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


def commit_decision(
    logits: torch.Tensor,
    masked: torch.Tensor,
    threshold: float | torch.Tensor,
    banned: torch.Tensor,
    ends: torch.Tensor,
) -> CommitDecision:
    """One denoising step's decision for ``logits`` ``[batch, block, vocab]`` (contract:
    :func:`cadence.kernels.commit_reference.commit_reference`). ``threshold`` may live on the device
    (a one-element tensor), so that a captured step reads the current τ at every replay."""
    if backend(logits.device) == "triton":
        from cadence.kernels.triton_commit import commit_triton

        if not isinstance(threshold, torch.Tensor):
            threshold = torch.full((1,), threshold, dtype=torch.float32, device=logits.device)
        return commit_triton(logits, masked, threshold, banned, ends)
    return commit_reference(logits, masked, threshold, banned, ends)
