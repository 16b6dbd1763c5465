"""The transformer shared by the diffusion model and the autoregressive baseline.

Pre-norm decoder blocks with RMSNorm, rotary position embeddings and SwiGLU, tied input and
output embeddings. The two models differ only in who may attend to whom (see
:mod:`cadence.llm.attention_masks`), which callers pass as a mask, so one set of weights can move
from causal to block-causal attention: that is how the diffusion model starts from the AR one.
Attention itself goes through :func:`cadence.kernels.attention`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch
from torch import nn
from torch.nn import functional

from cadence import kernels
from cadence.kernels import CachedBlock
from cadence.llm.kv_cache import KeyValueStore, KVCache

AttentionMode = Literal["causal", "block_causal"]


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    attention: AttentionMode
    """`causal` for the AR baseline, `block_causal` for the diffusion model."""
    block_size: int = 8
    d_model: int = 256
    n_layers: int = 6
    n_heads: int = 4
    ffn_hidden: int = 704
    rope_base: float = 10_000.0
    max_positions: int = 2048

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class RotaryEmbedding(nn.Module):
    """Rotates query/key channel pairs by an angle proportional to the position, so attention
    scores depend on relative positions only."""

    def __init__(self, head_dim: int, base: float, max_positions: int) -> None:
        super().__init__()
        inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angles = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
        self.cos: torch.Tensor
        self.sin: torch.Tensor
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``x`` is ``[batch, heads, tokens, head_dim]``, ``positions`` ``[batch, tokens]``."""
        cos = self.cos[positions].unsqueeze(1)
        sin = self.sin[positions].unsqueeze(1)
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, rotary: RotaryEmbedding) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.out = nn.Linear(config.d_model, config.d_model, bias=False)
        self.rotary = rotary

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        allowed: torch.Tensor | CachedBlock | None,
        cache: KeyValueStore | None,
        layer: int,
        keep: int,
    ) -> torch.Tensor:
        batch, tokens, width = x.shape
        q, k, v = (
            part.view(batch, tokens, self.n_heads, -1).transpose(1, 2)
            for part in self.qkv(x).chunk(3, dim=-1)
        )
        q, k = self.rotary(q, positions), self.rotary(k, positions)
        if cache is not None:
            k, v = cache.extend(layer, k, v, keep)
        y = kernels.attention(q, k, v, allowed)
        out: torch.Tensor = self.out(y.transpose(1, 2).reshape(batch, tokens, width))
        return out


class SwiGLU(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.gate_up = nn.Linear(config.d_model, 2 * config.ffn_hidden, bias=False)
        self.down = nn.Linear(config.ffn_hidden, config.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        out: torch.Tensor = self.down(functional.silu(gate) * up)
        return out


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, rotary: RotaryEmbedding) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(config.d_model)
        self.attention = Attention(config, rotary)
        self.mlp_norm = RMSNorm(config.d_model)
        self.mlp = SwiGLU(config)

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        allowed: torch.Tensor | CachedBlock | None,
        cache: KeyValueStore | None,
        layer: int,
        keep: int,
    ) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), positions, allowed, cache, layer, keep)
        out: torch.Tensor = x + self.mlp(self.mlp_norm(x))
        return out


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        rotary = RotaryEmbedding(
            config.d_model // config.n_heads, config.rope_base, config.max_positions
        )
        self.embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.layers = nn.ModuleList(DecoderLayer(config, rotary) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.d_model)
        self.apply(_init_weights)

    def forward(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        allowed: torch.Tensor | CachedBlock | None,
        cache: KeyValueStore | None = None,
        keep: int | None = None,
    ) -> torch.Tensor:
        """Logits ``[batch, tokens, vocab]``; the output at position *i* predicts token *i+1*.

        ``allowed`` is ``[batch, 1, tokens, cached + tokens]`` (``True`` = may attend), or a
        :class:`cadence.kernels.CachedBlock` when the input is one block over a padded cache. With a
        ``cache``, the keys of earlier calls come first and the first ``keep`` input positions
        (all by default) are appended to it; the rest are seen by this call only.
        """
        x = self.embedding(ids)
        keep = ids.shape[1] if keep is None else keep
        for index, layer in enumerate(self.layers):
            x = layer(x, positions, allowed, cache, index, keep)
        return functional.linear(self.norm(x), self.embedding.weight)

    def new_cache(self) -> KVCache:
        return KVCache(self.config.n_layers)


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
