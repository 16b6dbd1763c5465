"""Reads a Llama-architecture GGUF file (SmolLM2's) into Cadence's own network.

The ``gguf`` package parses the file and dequantizes each tensor (Q4_1 blocks, the Q8_0
embedding) to float32 numpy; nothing of llama.cpp runs. Two things differ from the names and
layout the network expects, and both are undone here:

* tensor names: ``blk.N.attn_q.weight`` → ``model.layers.N.self_attn.q_proj.weight`` …;
* the query and key projections: llama.cpp's converter permutes their rows so that RoPE can
  rotate adjacent channel pairs; Cadence's attention rotates the two halves of each head, as
  the model was trained, so the rows are put back.

A Llama decoder is a Qwen2 decoder without the projection biases, so the network is
:class:`~cadence.llm.open_weights.network.QwenForCausalLM` with that shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from tokenizers import Tokenizer

from cadence.llm.open_weights.shape import QwenShape
from cadence.llm.pretrained.smollm2 import PretrainedModelError
from cadence.llm.pretrained.tokenizer import build_tokenizer

_LAYER_TENSORS = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}


@dataclass(frozen=True)
class GGUFModel:
    shape: QwenShape
    tensors: dict[str, torch.Tensor]
    """Float32, named as the network's parameters."""
    tokenizer: Tokenizer
    name: str
    """``general.name`` of the file."""


def read_gguf(path: Path, *, tensors: bool = True) -> GGUFModel:
    """The model in ``path``; with ``tensors=False`` its shape, tokenizer and name only (what
    running a built graph needs: no weight is dequantized)."""
    from gguf import GGUFReader  # imported here: only loading a model needs it
    from gguf.quants import dequantize

    try:
        reader = GGUFReader(path)
    except (OSError, ValueError) as exc:
        raise PretrainedModelError(f"{path} is not a readable GGUF file: {exc}") from exc
    fields = {name: field.contents() for name, field in reader.fields.items()}
    arch = fields.get("general.architecture")
    if arch != "llama":
        raise PretrainedModelError(f"{path}: architecture {arch!r}; Cadence reads only llama")
    tied = all(tensor.name != "output.weight" for tensor in reader.tensors)
    shape = _shape(fields, path, tied)
    weights: dict[str, torch.Tensor] = {}
    for tensor in reader.tensors if tensors else ():
        values = dequantize(tensor.data, tensor.tensor_type)
        dims = [int(d) for d in reversed(tensor.shape)]  # GGUF lists the fastest axis first
        array = np.asarray(values, dtype=np.float32).reshape(dims)
        name, array = _renamed(tensor.name, array, shape)
        weights[name] = torch.from_numpy(np.array(array, dtype=np.float32, copy=True))
    tokenizer = build_tokenizer(
        fields["tokenizer.ggml.tokens"],
        fields["tokenizer.ggml.token_type"],
        fields["tokenizer.ggml.merges"],
    )
    return GGUFModel(shape, weights, tokenizer, str(fields.get("general.name", path.name)))


def _shape(fields: dict[str, Any], path: Path, tied: bool) -> QwenShape:
    def value(key: str) -> Any:
        if f"llama.{key}" not in fields:
            raise PretrainedModelError(f"{path} lacks llama.{key}")
        return fields[f"llama.{key}"]

    hidden, heads = int(value("embedding_length")), int(value("attention.head_count"))
    return QwenShape(
        vocab_size=len(fields["tokenizer.ggml.tokens"]),
        hidden_size=hidden,
        intermediate_size=int(value("feed_forward_length")),
        num_layers=int(value("block_count")),
        num_heads=heads,
        num_kv_heads=int(value("attention.head_count_kv")),
        head_dim=hidden // heads,
        rope_theta=float(value("rope.freq_base")),
        rms_norm_eps=float(value("attention.layer_norm_rms_epsilon")),
        tie_word_embeddings=tied,
        qkv_bias=False,
        qk_norm=False,
    )


def _renamed(
    name: str, array: npt.NDArray[np.float32], shape: QwenShape
) -> tuple[str, npt.NDArray[np.float32]]:
    if name == "token_embd.weight":
        return "model.embed_tokens.weight", array
    if name == "output_norm.weight":
        return "model.norm.weight", array
    if name == "output.weight":
        return "lm_head.weight", array
    _, layer, kind, _ = name.split(".")
    if kind == "attn_q":
        array = _unpermute(array, shape.num_heads)
    elif kind == "attn_k":
        array = _unpermute(array, shape.num_kv_heads)
    return f"model.layers.{layer}.{_LAYER_TENSORS[kind]}.weight", array


def _unpermute(weight: npt.NDArray[np.float32], heads: int) -> npt.NDArray[np.float32]:
    """Undo llama.cpp's row order for rotating adjacent pairs: per head, rows ``0, 2, 4, …``
    were the first half and ``1, 3, 5, …`` the second."""
    rows = weight.shape[0]
    return (
        weight.reshape(heads, rows // heads // 2, 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )
