"""The network made fast for scoring a few new tokens at a time on a CPU.

Scoring the caller's words extends the conversation by a handful of tokens at a time, so each
of the 210 projections is a product of 1–8 rows with a weight matrix, and the time goes into
reading 106 M weights from memory per pass and into oneDNN laying each weight out anew on every
call. Measured on the 2-core dev CPU (Xeon with AMX; one thread; a booking call's conversation,
one word added per pass; docs/end-of-turn.md):

================================  ============  ==================  =======================
weights                           a word added  a 35-token prefill  a row's result depends
                                                                    on the other rows
================================  ============  ==================  =======================
float32                           ~72 ms        ~150 ms             no
bfloat16, packed once for oneDNN  37 ms         57 ms               no
int8 weights only (int8pack)      29 ms         ~10× bfloat16's     no
int8 dynamic (fbgemm)             26 ms         48 ms               **yes**
================================  ============  ==================  =======================

Dynamic int8 quantizes the activations with one scale for all the rows of a pass, so the same
words scored after a different sequence of partial transcripts got a P(end of turn) off by up
to tenths: a decision must not depend on how the transcript arrived. Weight-only int8 is
row-independent but ten times slower on a prefill. Here every projection and the output head
are bfloat16, packed once at load — worth it only where oneDNN computes bfloat16 natively
(AVX-512 BF16 or AMX; elsewhere it is emulated, slower than float32). It is no longer the
default: the int8 graph on onnxruntime (``llm/engine/``), which quantizes each row's
activations on its own, is row-independent and faster on every CPU measured
(docs/end-of-turn.md). A second thread did not help: with the other core busy, as it is
during a call, two threads were slower than one.
"""

from __future__ import annotations

import torch
from torch import nn


class PackedLinear(nn.Module):
    """``y = x Wᵀ`` (no bias), ``W`` held bfloat16 in oneDNN's blocked layout; ``x`` and
    ``y`` are bfloat16."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        plain = weight.detach().to(torch.bfloat16).contiguous()
        # The layout is chosen for a batch size; measured the same from 1 to 60 rows.
        self._packed = torch.ops.mkldnn._reorder_linear_weight(plain, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(
            x.to(torch.bfloat16), self._packed, None, "none", [], ""
        )
        return out


def pack_for_cpu(network: nn.Module, head: torch.Tensor) -> None:
    """Turn ``network`` bfloat16 in place: every bias-free ``nn.Linear`` packed, the rest
    (embeddings, norms) cast, and ``head`` (the output matrix; for a tied head, the embeddings)
    packed as its ``lm_head``."""
    for module in list(network.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear) and child.bias is None:
                setattr(module, name, PackedLinear(child.weight))
    network.to(torch.bfloat16)
    network.lm_head = PackedLinear(head)
