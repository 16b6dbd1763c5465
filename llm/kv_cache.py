"""Keys and values of the positions already decoded, per layer.

Exact because of what enters it: whole finished blocks (block-causal attention: nothing a
block sees can change once it is finished) or finished tokens (causal attention).
"""

from __future__ import annotations

from typing import Protocol

import torch


class KeyValueStore(Protocol):
    """What attention needs from a cache: :class:`KVCache`, or the fixed-shape buffers of a
    captured decode step (:mod:`cadence.llm.graphed_decoder`)."""

    def extend(
        self, layer: int, keys: torch.Tensor, values: torch.Tensor, keep: int
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


class ConversationStore(KeyValueStore, Protocol):
    """A cache a conversation keeps across turns: :class:`KVCache`, or the preallocated
    buffers of the open-weight graphed decoder
    (:class:`cadence.llm.open_weights.static_cache.StaticKVCache`)."""

    def cached(self, layer: int) -> tuple[torch.Tensor, torch.Tensor] | None: ...

    def truncate(self, length: int) -> None: ...


class KVCache:
    def __init__(self, n_layers: int) -> None:
        self._keys: list[torch.Tensor | None] = [None] * n_layers
        self._values: list[torch.Tensor | None] = [None] * n_layers

    @property
    def length(self) -> int:
        first = self._keys[0]
        return 0 if first is None else first.shape[2]

    def extend(
        self, layer: int, keys: torch.Tensor, values: torch.Tensor, keep: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values for this call's attention: the cached ones followed by ``keys`` and
        ``values``; only the first ``keep`` new positions stay in the cache afterwards."""
        past_k, past_v = self._keys[layer], self._values[layer]
        cached = 0
        if past_k is not None and past_v is not None:
            cached = past_k.shape[2]
            keys, values = torch.cat((past_k, keys), dim=2), torch.cat((past_v, values), dim=2)
        self._keys[layer] = keys[:, :, : cached + keep]
        self._values[layer] = values[:, :, : cached + keep]
        return keys, values

    def cached(self, layer: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The cached keys and values of ``layer`` (``[batch, heads, length, dim]``), or
        ``None`` while nothing is cached."""
        keys, values = self._keys[layer], self._values[layer]
        return None if keys is None or values is None else (keys, values)

    def truncate(self, length: int) -> None:
        """Forget every position from ``length`` on."""
        for layer, (keys, values) in enumerate(zip(self._keys, self._values, strict=True)):
            if keys is not None and values is not None:
                self._keys[layer] = keys[:, :, :length]
                self._values[layer] = values[:, :, :length]
