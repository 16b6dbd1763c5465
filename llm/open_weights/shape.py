"""The shape of a Qwen2/Qwen3 decoder, read from ``config.json``.

Only what the network needs is read, and every value is checked for the type it must have, so
a hand-edited or truncated ``config.json`` fails here with the key named rather than as a
shape error deep inside PyTorch. What Cadence does not implement (sliding-window attention,
scaled RoPE, another activation) is refused rather than silently computed wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from cadence.llm.open_weights.families import Family
from cadence.llm.open_weights.files import CONFIG, OpenWeightsError


@dataclass(frozen=True)
class QwenShape:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float
    tie_word_embeddings: bool
    qkv_bias: bool
    """Qwen2: the query, key and value projections have a bias."""
    qk_norm: bool
    """Qwen3: each query and key head is RMS-normalised before RoPE."""

    @classmethod
    def from_config(cls, config: dict[str, Any], family: Family, root: Path) -> QwenShape:
        reader = _Reader(config, root / CONFIG)
        hidden = reader.integer("hidden_size")
        heads = reader.integer("num_attention_heads")
        kv_heads = reader.integer("num_key_value_heads", heads)
        if heads % kv_heads:
            reader.fail(f"num_attention_heads {heads} is not a multiple of num_key_value_heads")
        reader.require("hidden_act", "silu", "silu")
        reader.require("use_sliding_window", False, False)
        if family.qk_norm:  # Qwen3 configs say whether the projections have a bias
            reader.require("attention_bias", family.qkv_bias, family.qkv_bias)
        return cls(
            vocab_size=reader.integer("vocab_size"),
            hidden_size=hidden,
            intermediate_size=reader.integer("intermediate_size"),
            num_layers=reader.integer("num_hidden_layers"),
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=reader.integer("head_dim", hidden // heads),
            rope_theta=reader.rope_theta(),
            rms_norm_eps=reader.number("rms_norm_eps", 1e-6),
            tie_word_embeddings=reader.flag("tie_word_embeddings", False),
            qkv_bias=family.qkv_bias,
            qk_norm=family.qk_norm,
        )


class _Reader:
    """Typed reads of ``config.json`` that fail with the file and key named."""

    def __init__(self, config: dict[str, Any], path: Path) -> None:
        self._config = config
        self._path = path

    def fail(self, problem: str) -> NoReturn:
        raise OpenWeightsError(self._path, problem)

    def _get(self, key: str, default: Any) -> Any:
        value = self._config.get(key, default)
        if value is None:
            self.fail(f"lacks {key}")
        return value

    def integer(self, key: str, default: int | None = None) -> int:
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            self.fail(f"{key} is {value!r}, not a positive integer")
        return int(value)

    def number(self, key: str, default: float | None = None) -> float:
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            self.fail(f"{key} is {value!r}, not a positive number")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self._get(key, default)
        if not isinstance(value, bool):
            self.fail(f"{key} is {value!r}, not true or false")
        return bool(value)

    def require(self, key: str, wanted: Any, default: Any) -> None:
        """``key`` (``default`` when absent) must be ``wanted``: the only case implemented."""
        value = self._config.get(key, default)
        if value != wanted:
            self.fail(f"{key} is {value!r}; Cadence implements only {wanted!r}")

    def rope_theta(self) -> float:
        """RoPE's base, from ``rope_theta`` (transformers 4) or ``rope_parameters``
        (transformers 5); only unscaled RoPE is implemented."""
        parameters = self._config.get("rope_parameters") or self._config.get("rope_scaling") or {}
        kind = parameters.get("rope_type", parameters.get("type", "default"))
        if kind != "default":
            self.fail(f"RoPE type {kind!r}; Cadence implements only unscaled RoPE")
        theta = self._config.get("rope_theta", parameters.get("rope_theta", 10_000.0))
        if isinstance(theta, bool) or not isinstance(theta, int | float) or theta <= 0:
            self.fail(f"rope_theta is {theta!r}, not a positive number")
        return float(theta)
