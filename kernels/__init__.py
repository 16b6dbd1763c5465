"""Compute kernels behind one dispatcher: Triton on CUDA (later), a PyTorch reference elsewhere.

Callers use :func:`attention` only; which implementation runs is decided by
:mod:`kernels.dispatch` from the tensors' device, so model code never branches on hardware.
"""

from kernels.dispatch import attention, attention_backend

__all__ = ["attention", "attention_backend"]
