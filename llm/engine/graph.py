"""The ONNX graph of one step of :class:`cadence.llm.open_weights.network.QwenForCausalLM`.

One graph serves every way the network is called — a prefill, a greedy step, a block of
diffusion, the end of turn's branches — because everything that differs between them is an
input, not a shape baked in::

    inputs:  ids [1, T], positions [1, T], bias [1, 1, T, P + T] (additive: 0 may attend,
             -1e9 may not), rows [R] (the positions whose logits are wanted),
             past_k_L / past_v_L [1, kv_heads, P, head_dim] for each layer L
    outputs: logits [1, R, vocab], present_k_L / present_v_L [1, kv_heads, P + T, head_dim]

So the block-causal mask of block diffusion (bidirectional inside the block) is just another
bias, and a prefill computes the output head for one row instead of T (the head is the largest
matmul of a 135M model with a 49,152-word vocabulary).

The export runs PyTorch's TorchScript exporter over the very network the PyTorch path runs —
the same modules and weights (an adapter merged in) — with two stand-ins the exporter needs:
RMSNorm written out (opset 17 has no operator for it) and a key/value store that returns the
presents instead of keeping them. Then every MatMul's weights become int8 in blocks of 32
with a scale each (onnxruntime's ``MatMulNBits``), computed in int8 with each position's
activations quantized on their own. Chosen by measurement (docs/llm.md, "The engine"):
onnxruntime's *dynamic* int8, one activation scale per call, was as fast on a decode step
(27.5 ms against 27.9, faster on blocks and prefill) but wrote the corpus agent's call exactly
in 20 of 149 turns where float32 wrote it in 35 and this one in 33 — and its answers changed
with how a prompt was split between cache and new tokens, since the scale depends on the
whole batch.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import torch
from torch import nn

from cadence.llm.open_weights.network import QwenForCausalLM

OPSET = 17
GRAPH_VERSION = 2
"""Changes whenever the graph's inputs, outputs or export change: part of every cache key."""
WEIGHT_BLOCK = 32
"""Weights are quantized in blocks of this many along the input axis, each with its scale."""
INT8_COMPUTE = 4
"""onnxruntime's ``accuracy_level`` 4: the MatMuls compute in int8, each input row quantized
per block of its own (not one scale for the whole batch of positions)."""
NEVER = -1e9
"""The bias of a position that may not be attended to (finite: a softmax of -inf rows is NaN)."""


def input_names(layers: int) -> list[str]:
    return ["ids", "positions", "bias", "rows", *_kv_names("past", layers)]


def output_names(layers: int) -> list[str]:
    return ["logits", *_kv_names("present", layers)]


def _kv_names(prefix: str, layers: int) -> list[str]:
    return [f"{prefix}_{kind}_{layer}" for layer in range(layers) for kind in ("k", "v")]


class _WrittenRMSNorm(nn.Module):
    """``nn.RMSNorm`` as the operators opset 17 has (same weight, same epsilon)."""

    def __init__(self, norm: nn.RMSNorm) -> None:
        super().__init__()
        self.weight = norm.weight
        self.eps = float(norm.eps or torch.finfo(torch.float32).eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class _PresentStore:
    """A key/value store that appends the new keys to the given past ones and remembers the
    result as each layer's present (the graph's outputs) instead of keeping a cache."""

    def __init__(self, past: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.past = past
        self.present: list[tuple[torch.Tensor, torch.Tensor]] = []

    def extend(
        self, layer: int, keys: torch.Tensor, values: torch.Tensor, keep: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        past_k, past_v = self.past[layer]
        keys, values = torch.cat((past_k, keys), dim=2), torch.cat((past_v, values), dim=2)
        self.present.append((keys, values))
        return keys, values


class _Step(nn.Module):
    def __init__(self, network: QwenForCausalLM) -> None:
        super().__init__()
        self.network = network

    def forward(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        bias: torch.Tensor,
        rows: torch.Tensor,
        *past: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        store = _PresentStore([(past[i], past[i + 1]) for i in range(0, len(past), 2)])
        logits = self.network(ids, positions, bias, store, rows=rows)
        return (logits, *(tensor for pair in store.present for tensor in pair))


def _write_norms(module: nn.Module) -> None:
    for name, child in module.named_children():
        if isinstance(child, nn.RMSNorm):
            setattr(module, name, _WrittenRMSNorm(child))
        else:
            _write_norms(child)


def export_int8(network: QwenForCausalLM, path: Path) -> None:
    """Write ``network`` (float32, on the CPU, not packed; it is changed: its norms are
    rewritten) as the int8 graph ``path`` (see the module); a float32 graph is written beside
    it first and removed."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    full = path.with_suffix(".fp32.onnx")
    export_fp32(network, full)
    try:
        logging.disable(logging.INFO)  # the quantizer logs every MatMul it visits
        quantizer = MatMulNBitsQuantizer(
            onnx.load(str(full)),
            bits=8,
            block_size=WEIGHT_BLOCK,
            is_symmetric=True,
            accuracy_level=INT8_COMPUTE,
            op_types_to_quantize=("MatMul",),
        )
        quantizer.process()
        quantizer.model.save_model_to_file(str(path), use_external_data_format=False)
    finally:
        logging.disable(logging.NOTSET)
        full.unlink(missing_ok=True)


def export_fp32(network: QwenForCausalLM, path: Path) -> None:
    """Write ``network`` as the float32 graph ``path`` (its norms are rewritten in place): the
    graph the int8 one is quantized from, and what the tests hold against the network."""

    shape = network.shape
    _write_norms(network)
    step = _Step(network).eval()
    tokens, cached = 3, 2
    past = [
        torch.zeros(1, shape.num_kv_heads, cached, shape.head_dim)
        for _ in range(2 * shape.num_layers)
    ]
    example = (
        torch.zeros(1, tokens, dtype=torch.long),
        torch.arange(cached, cached + tokens)[None],
        torch.zeros(1, 1, tokens, cached + tokens),
        torch.tensor([tokens - 1]),
        *past,
    )
    names_in, names_out = input_names(shape.num_layers), output_names(shape.num_layers)
    axes: dict[str, dict[int, str]] = {
        "ids": {1: "tokens"},
        "positions": {1: "tokens"},
        "bias": {2: "tokens", 3: "keys"},
        "rows": {0: "rows"},
        "logits": {1: "rows"},
    }
    axes |= {name: {2: "cached"} for name in names_in[4:]}
    axes |= {name: {2: "keys"} for name in names_out[1:]}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(
            step,
            example,
            str(path),
            input_names=names_in,
            output_names=names_out,
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )
