"""Compute kernels behind one dispatcher: Triton on CUDA, a PyTorch reference elsewhere.

Callers use the functions exported here; which implementation runs is decided by
:mod:`cadence.kernels.dispatch` from the tensors' device, so model code never branches on hardware.
The kernels are the two that a block-diffusion decode step spends its launches on: attention
of the current block over the cache (:func:`attention` with a :class:`CachedBlock`) and the
commit decision (:func:`commit_decision`).
"""

from cadence.kernels.commit_reference import CommitDecision
from cadence.kernels.dispatch import (
    Backend,
    CachedBlock,
    attention,
    backend,
    block_attention,
    commit_decision,
    use_backend,
)

__all__ = [
    "Backend",
    "CachedBlock",
    "CommitDecision",
    "attention",
    "backend",
    "block_attention",
    "commit_decision",
    "use_backend",
]
