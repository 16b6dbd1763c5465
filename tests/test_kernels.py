"""The kernel dispatcher: the reference path on CPU, equal to an explicit softmax attention."""

from __future__ import annotations

import math

import torch

import kernels


def test_cpu_tensors_take_the_reference_path() -> None:
    assert kernels.attention_backend(torch.device("cpu")) == "reference"


def test_attention_matches_an_explicit_masked_softmax() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8) for _ in range(3))
    allowed = torch.rand(2, 1, 5, 5) > 0.4
    allowed |= torch.eye(5, dtype=torch.bool)  # every row sees at least itself
    scores = q @ k.transpose(-1, -2) / math.sqrt(8)
    expected = scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v
    torch.testing.assert_close(kernels.attention(q, k, v, allowed), expected)
