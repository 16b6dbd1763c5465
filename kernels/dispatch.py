"""Chooses the implementation of each kernel for the device the tensors live on.

Only the PyTorch reference exists so far; the Triton kernels register here once written, and
CPU tensors always take the reference path.
"""

from __future__ import annotations

import torch

from kernels.reference import attention_reference


def attention_backend(device: torch.device) -> str:
    """Name of the attention implementation used for tensors on ``device``."""
    del device  # every device takes the reference until the Triton kernels land
    return "reference"


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None
) -> torch.Tensor:
    """Attention of ``q`` over ``k``/``v`` under the boolean ``allowed`` mask (see
    :func:`kernels.reference.attention_reference` for shapes)."""
    return attention_reference(q, k, v, allowed)
