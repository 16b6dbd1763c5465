"""The conversation's KV cache in preallocated buffers, for fixed-shape (CUDA-graph) steps.

:class:`~cadence.llm.kv_cache.KVCache` grows by concatenation: every step reads tensors that
did not exist before, which a CUDA graph cannot replay. :class:`StaticKVCache` keeps each
layer's keys and values in one buffer ``[1, kv_heads, capacity, head_dim]`` at the
positions' own slots, so that

* an eager forward (a prefill of many blocks, a reply's first prompt) extends it as it
  extends a ``KVCache`` (:meth:`StaticKVCache.extend`: same contract);
* a captured step sees it through a :class:`BucketView`: ``slots`` cache slots (the first
  ``length`` valid, the rest padding that the block attention never reads), then ``block``
  scratch slots where the step writes its own block's keys and values. A step that *carries*
  a finished block also writes them at the cache's next slots, through an index tensor on
  the device (``write_at``), so the same graph appends to the cache when told to and leaves
  it as it was otherwise.

The buffers never move while graphs read them; when the conversation outgrows them they are
reallocated (doubled) and :attr:`StaticKVCache.generation` changes, which tells the decoder
that its captured graphs read stale buffers.
"""

from __future__ import annotations

import torch

from cadence.kernels.cuda_graph import bucket_length
from cadence.llm.open_weights.shape import QwenShape

INITIAL_POSITIONS = 1024
"""Cache slots allocated at first (a call's history is a few hundred tokens)."""


class StaticKVCache:
    def __init__(
        self, shape: QwenShape, block: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        self._shape, self._block, self._dtype, self._device = shape, block, dtype, device
        self.length = 0
        """Cached positions: slots ``[0, length)`` of every layer hold them."""
        self.generation = 0
        """Changes whenever the buffers are reallocated."""
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self._allocate(INITIAL_POSITIONS)

    @property
    def capacity(self) -> int:
        """Slots per layer: the largest bucket that fits, plus a block of scratch."""
        return self.keys[0].shape[2]

    def _allocate(self, positions: int) -> None:
        shape = self._shape
        size = (1, shape.num_kv_heads, bucket_length(positions) + self._block, shape.head_dim)
        old_keys, old_values = self.keys, self.values
        self.keys = [
            torch.zeros(size, dtype=self._dtype, device=self._device)
            for _ in range(shape.num_layers)
        ]
        self.values = [torch.zeros_like(k) for k in self.keys]
        for new, old in zip(self.keys + self.values, old_keys + old_values, strict=False):
            new[:, :, : self.length] = old[:, :, : self.length]
        self.generation += 1

    def reserve(self, slots: int) -> None:
        """Make room for a bucket of ``slots`` cache slots and its scratch block."""
        if slots + self._block > self.capacity:
            self._allocate(2 * slots)

    def extend(
        self, layer: int, keys: torch.Tensor, values: torch.Tensor, keep: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`cadence.llm.kv_cache.KVCache.extend`'s contract: the cached keys and values
        followed by ``keys``/``values``; the first ``keep`` new positions stay cached (the
        length moves once the last layer has them)."""
        end = self.length + keys.shape[2]
        if layer == 0:
            self.reserve(bucket_length(end))
        self.keys[layer][:, :, self.length : end] = keys
        self.values[layer][:, :, self.length : end] = values
        out = self.keys[layer][:, :, :end], self.values[layer][:, :, :end]
        if layer == len(self.keys) - 1:
            self.length += keep
        return out

    def cached(self, layer: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        if self.length == 0:
            return None
        return self.keys[layer][:, :, : self.length], self.values[layer][:, :, : self.length]

    def truncate(self, length: int) -> None:
        """Forget every position from ``length`` on (the slots are overwritten later)."""
        self.length = min(self.length, length)

    def advance(self, positions: int) -> None:
        """A captured step carried ``positions`` more into the cache's slots."""
        self.length += positions


class BucketView:
    """The fixed-shape cache a captured step reads: ``slots`` cache slots, then the step's
    block in the scratch slots after them (written at every step), and the block written
    again at ``write_at`` — the scratch slots themselves, or the cache's next slots when the
    step carries the block into the cache."""

    def __init__(self, cache: StaticKVCache, slots: int, write_at: torch.Tensor) -> None:
        self._cache, self._slots, self._write_at = cache, slots, write_at

    def extend(
        self, layer: int, keys: torch.Tensor, values: torch.Tensor, keep: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        end = self._slots + keys.shape[2]
        all_keys, all_values = self._cache.keys[layer], self._cache.values[layer]
        all_keys[:, :, self._slots : end] = keys
        all_values[:, :, self._slots : end] = values
        all_keys.index_copy_(2, self._write_at, keys)
        all_values.index_copy_(2, self._write_at, values)
        return all_keys[:, :, :end], all_values[:, :, :end]
