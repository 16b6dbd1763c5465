"""Random-weight Fast-dLLM v2 and SDAR directories at the published models' shapes, for the
GPU bench: nothing is downloaded, and transformers is not needed.

The layout is :mod:`cadence.tooling.bench.tiny_open_weights`'s — the family's ``config.json``
keys, the tiny byte-level BPE ``tokenizer.json`` with Qwen's control tokens and the family's
mask at their real ids, ``tokenizer_config.json`` — but the network is the published one:

* **Fast-dLLM v2** = Qwen2.5-1.5B: 28 layers of width 1,536 (12 query heads, 2 key/value
  heads of 128, MLP 8,960, a bias on q/k/v), tied embeddings, blocks of 32;
* **SDAR** = Qwen3-1.7B: 28 layers of width 2,048 (16 query heads, 8 key/value heads of 128,
  MLP 6,144, RMSNorm on each query and key head), its own output head, blocks of 4.

Both have the real 151,936-row vocabulary. The weights are drawn on the target device
(N(0, 0.02²), norms 1: activations stay finite through 28 bfloat16 layers), named and shaped
by Cadence's own network, and written as one ``model.safetensors``. A random model is never
confident: it commits about one token a step, the worst case of the decoder. ``tiny`` is the
same at width 32 and 2 layers, for the bench's own tests on CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors.torch import save_file

from cadence.llm.open_weights import FAST_DLLM_V2, SDAR, Family
from cadence.llm.open_weights.network import QwenForCausalLM
from cadence.llm.open_weights.shape import QwenShape
from cadence.tooling.bench.tiny_open_weights import tokenizer_config, tokenizer_json, write_json

Size = Literal["full", "tiny"]
VOCAB = 151_936


@dataclass(frozen=True)
class Published:
    family: Family
    block_size: int
    base: str
    """The published model whose shape this is."""
    shape: dict[str, Any]
    """``config.json`` keys of the network (full size)."""


MODELS = {
    "fast-dllm-v2": Published(
        FAST_DLLM_V2,
        32,
        "Qwen2.5-1.5B",
        {
            "hidden_size": 1536,
            "intermediate_size": 8960,
            "num_hidden_layers": 28,
            "num_attention_heads": 12,
            "num_key_value_heads": 2,
            "head_dim": 128,
            "tie_word_embeddings": True,
        },
    ),
    "sdar": Published(
        SDAR,
        4,
        "Qwen3-1.7B",
        {
            "hidden_size": 2048,
            "intermediate_size": 6144,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "tie_word_embeddings": False,
        },
    ),
}
TINY_SHAPE = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
}


def config_json(name: str, size: Size) -> dict[str, Any]:
    """The family's ``config.json``, as the published directories write it."""
    model = MODELS[name]
    family = model.family
    shape = model.shape | (TINY_SHAPE if size == "tiny" else {})
    config: dict[str, Any] = {
        "architectures": [family.architecture],
        "model_type": family.model_type,
        "vocab_size": VOCAB,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 32768,
        "use_sliding_window": False,
        "torch_dtype": "bfloat16",
        family.block_size_key: model.block_size,
        **shape,
    }
    if family is FAST_DLLM_V2:
        config.update(
            eos_token_id=151645, rope_parameters={"rope_type": "default", "rope_theta": 1e6}
        )
    else:
        config.update(
            eos_token_id=151643,
            mask_token_id=family.mask_id,
            rope_scaling=None,
            rope_theta=1e6,
            attention_bias=False,
        )
    return config


def build(name: str, directory: Path, size: Size, device: torch.device, seed: int = 0) -> int:
    """Write model ``name`` (a key of :data:`MODELS`) to ``directory``; the parameter count."""
    model, config = MODELS[name], config_json(name, size)
    directory.mkdir(parents=True, exist_ok=True)
    shape = QwenShape.from_config(config, model.family, directory)
    with torch.device("meta"):
        names = QwenForCausalLM(shape).state_dict()
    generator = torch.Generator(device=device).manual_seed(seed)
    tensors = {}
    for key, meta in names.items():
        values = torch.randn(meta.shape, generator=generator, device=device) * 0.02
        if "norm" in key:
            values += 1.0
        tensors[key] = values.to(torch.bfloat16).cpu()
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    write_json(directory / "config.json", config)
    (directory / "tokenizer.json").write_text(tokenizer_json(model.family), encoding="utf-8")
    write_json(directory / "tokenizer_config.json", tokenizer_config(model.family))
    return sum(meta.numel() for meta in names.values())
