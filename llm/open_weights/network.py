"""Cadence's own PyTorch implementation of the Qwen2 and Qwen3 decoders.

Written from the architecture's description (pre-norm layers with RMSNorm, grouped-query
attention, rotary embeddings over halves of each head, SwiGLU; Qwen2 with a bias on the query,
key and value projections, Qwen3 with RMSNorm on each query and key head), so that a model
directory's weights load without importing any code from it. Module names mirror the
checkpoints' tensor names (``model.layers.N.self_attn.q_proj.weight`` …), so loading is a
strict name-for-name match and a tensor that is missing, extra or the wrong shape is reported
by name.

The forward has the contract of :class:`cadence.llm.model.Transformer` — who may attend to whom
comes as a mask, the conversation's KV cache is extended in place — and attention goes through
:func:`cadence.kernels.attention`.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional

from cadence import kernels
from cadence.llm.kv_cache import KeyValueStore, KVCache
from cadence.llm.open_weights.shape import QwenShape


def rotary_angles(
    positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosines and sines ``[batch, tokens, head_dim]`` for ``positions`` ``[batch, tokens]``
    (computed in float32, then cast, as the checkpoints were trained)."""
    exponents = torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim
    inverse_frequencies = 1.0 / theta**exponents
    angles = positions[..., None].float() * inverse_frequencies
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on ``x`` ``[batch, heads, tokens, head_dim]``: channel *j* of the first half pairs
    with channel *j* of the second half."""
    first, second = x.chunk(2, dim=-1)
    turned = torch.cat((-second, first), dim=-1)
    return x * cos[:, None] + turned * sin[:, None]


class QwenAttention(nn.Module):
    def __init__(self, shape: QwenShape) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = (
            shape.num_heads,
            shape.num_kv_heads,
            shape.head_dim,
        )
        width = shape.hidden_size
        self.q_proj = nn.Linear(width, self.heads * self.head_dim, bias=shape.qkv_bias)
        self.k_proj = nn.Linear(width, self.kv_heads * self.head_dim, bias=shape.qkv_bias)
        self.v_proj = nn.Linear(width, self.kv_heads * self.head_dim, bias=shape.qkv_bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, width, bias=False)
        self.q_norm = nn.RMSNorm(self.head_dim, shape.rms_norm_eps) if shape.qk_norm else None
        self.k_norm = nn.RMSNorm(self.head_dim, shape.rms_norm_eps) if shape.qk_norm else None

    def forward(
        self,
        x: torch.Tensor,
        angles: tuple[torch.Tensor, torch.Tensor],
        allowed: torch.Tensor | kernels.CachedBlock | None,
        cache: KeyValueStore | None,
        layer: int,
        keep: int,
    ) -> torch.Tensor:
        batch, tokens, _ = x.shape
        q = self.q_proj(x).view(batch, tokens, self.heads, self.head_dim)
        k = self.k_proj(x).view(batch, tokens, self.kv_heads, self.head_dim)
        v = self.v_proj(x).view(batch, tokens, self.kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q, k = rotate(q, *angles), rotate(k, *angles)
        if cache is not None:
            k, v = cache.extend(layer, k, v, keep)
        if isinstance(allowed, kernels.CachedBlock):  # block attention groups heads itself
            y = kernels.attention(q, k, v, allowed)
        else:
            groups = self.heads // self.kv_heads  # the cache keeps the fewer key/value heads
            y = kernels.attention(
                q, k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1), allowed
            )
        out: torch.Tensor = self.o_proj(y.transpose(1, 2).reshape(batch, tokens, -1))
        return out


class QwenMLP(nn.Module):
    def __init__(self, shape: QwenShape) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(shape.hidden_size, shape.intermediate_size, bias=False)
        self.up_proj = nn.Linear(shape.hidden_size, shape.intermediate_size, bias=False)
        self.down_proj = nn.Linear(shape.intermediate_size, shape.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down_proj(functional.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class QwenLayer(nn.Module):
    def __init__(self, shape: QwenShape) -> None:
        super().__init__()
        self.input_layernorm = nn.RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.self_attn = QwenAttention(shape)
        self.post_attention_layernorm = nn.RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.mlp = QwenMLP(shape)

    def forward(
        self,
        x: torch.Tensor,
        angles: tuple[torch.Tensor, torch.Tensor],
        allowed: torch.Tensor | kernels.CachedBlock | None,
        cache: KeyValueStore | None,
        layer: int,
        keep: int,
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), angles, allowed, cache, layer, keep)
        out: torch.Tensor = x + self.mlp(self.post_attention_layernorm(x))
        return out


class QwenBody(nn.Module):
    """Embeddings, layers and final norm (the checkpoints' ``model.`` prefix)."""

    def __init__(self, shape: QwenShape) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(shape.vocab_size, shape.hidden_size)
        self.layers = nn.ModuleList(QwenLayer(shape) for _ in range(shape.num_layers))
        self.norm = nn.RMSNorm(shape.hidden_size, shape.rms_norm_eps)


class QwenForCausalLM(nn.Module):
    def __init__(self, shape: QwenShape) -> None:
        super().__init__()
        self.shape = shape
        self.model = QwenBody(shape)
        self.lm_head: nn.Module | None = (
            None
            if shape.tie_word_embeddings
            else nn.Linear(shape.hidden_size, shape.vocab_size, bias=False)
        )

    def forward(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        allowed: torch.Tensor | kernels.CachedBlock | None,
        cache: KeyValueStore | None = None,
        keep: int | None = None,
        last: int | None = None,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits ``[batch, tokens, vocab]`` for ``ids`` at ``positions`` (both ``[batch,
        tokens]``), or of the ``last`` positions only: the output head is the largest matmul
        of a small model (a vocabulary of 151,936), and a prefill needs none of its rows.
        ``allowed`` is ``[batch, 1, tokens, cached + tokens]`` (``True`` = may attend; ``None`` =
        everything), or a :class:`cadence.kernels.CachedBlock` for a fixed-shape step over a
        padded cache (:mod:`cadence.llm.open_weights.graphed`; the block-attention kernels read
        the fewer key/value heads directly). With a ``cache``, the keys of earlier calls come
        first and the first ``keep`` input positions (all by default) are appended to it."""
        x = self.model.embed_tokens(ids)
        angles = rotary_angles(positions, self.shape.head_dim, self.shape.rope_theta, x.dtype)
        keep = ids.shape[1] if keep is None else keep
        for index, layer in enumerate(self.model.layers):
            x = layer(x, angles, allowed, cache, index, keep)
        if rows is not None:
            x = x.index_select(1, rows)
        elif last is not None:
            x = x[:, x.shape[1] - last :]
        x = self.model.norm(x)
        if self.lm_head is None:
            return functional.linear(x, self.model.embed_tokens.weight)
        out: torch.Tensor = self.lm_head(x)  # a module: it may be a CPU-packed one
        return out

    def new_cache(self) -> KVCache:
        return KVCache(self.shape.num_layers)
