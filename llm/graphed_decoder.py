"""Block diffusion decoding whose in-block steps run as one captured CUDA graph each.

After a block's first step (which also carries the previous block into the cache, a shape
that changes every time, so it runs eagerly), every further step of the block has the same
shape: the block's tokens over the cache. Those steps run on fixed buffers — the cache copied
into slots padded to a bucket (:func:`cadence.kernels.cuda_graph.bucket_length`), the block's ids,
positions, mask, τ and the row that predicts its first position — so that on CUDA the whole
step, forward and commit decision, is one graph replay per bucket with no host
synchronisation inside. Everywhere else (and in the CPU tests) the same fixed-shape step runs
eagerly, which is what checks it: it must commit the same tokens as
:class:`~llm.block_diffusion.BlockDiffusionDecoder`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from cadence import kernels
from cadence.core.clock import Clock
from cadence.kernels import CachedBlock, CommitDecision
from cadence.kernels.cuda_graph import CapturedStep, bucket_length
from cadence.llm.block_diffusion import BlockDiffusionDecoder
from cadence.llm.decoding import DecodingOptions
from cadence.llm.dialogue_format import DialogueFormat
from cadence.llm.model import ModelConfig, Transformer


@dataclass
class _StepBuffers:
    """The tensors a fixed-shape step reads; each step's inputs are written into them."""

    keys: list[torch.Tensor]
    """Per layer ``[1, heads, capacity + block, head_dim]``: the cache, then room for the
    keys of the block at the end of whichever bucket the step uses."""
    values: list[torch.Tensor]
    ids: torch.Tensor
    positions: torch.Tensor
    lengths: torch.Tensor
    """Valid cache positions (one sequence)."""
    masked: torch.Tensor
    tau: torch.Tensor
    before: torch.Tensor
    """The logits row that predicts the block's position 0 ..."""
    first_row: torch.Tensor
    """... or, where ``True``, the step's own first row (the reply's first block)."""

    @classmethod
    def allocate(cls, config: ModelConfig, capacity: int, like: torch.Tensor) -> _StepBuffers:
        block, heads = config.block_size, config.n_heads
        cache_shape = (1, heads, capacity + block, config.d_model // heads)

        def zeros(*shape: int, dtype: torch.dtype = like.dtype) -> torch.Tensor:
            return torch.zeros(shape, dtype=dtype, device=like.device)

        return cls(
            keys=[zeros(*cache_shape) for _ in range(config.n_layers)],
            values=[zeros(*cache_shape) for _ in range(config.n_layers)],
            ids=zeros(1, block, dtype=torch.long),
            positions=zeros(1, block, dtype=torch.long),
            lengths=zeros(1, dtype=torch.long),
            masked=zeros(1, block, dtype=torch.bool),
            tau=zeros(1, dtype=torch.float32),
            before=zeros(config.vocab_size),
            first_row=zeros(1, dtype=torch.bool),
        )


class _BucketView:
    """The fixed-shape cache of one bucket: ``slots`` cache slots, then the block's keys and
    values, written at every step (``keep`` is always 0: a step leaves the cache as it was)."""

    def __init__(self, buffers: _StepBuffers, slots: int) -> None:
        self._buffers = buffers
        self._slots = slots

    def extend(
        self, layer: int, keys: torch.Tensor, values: torch.Tensor, keep: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        end = self._slots + keys.shape[2]
        all_keys, all_values = self._buffers.keys[layer], self._buffers.values[layer]
        all_keys[:, :, self._slots : end] = keys
        all_values[:, :, self._slots : end] = values
        return all_keys[:, :, :end], all_values[:, :, :end]


class GraphedBlockDiffusionDecoder(BlockDiffusionDecoder):
    """A :class:`BlockDiffusionDecoder` whose in-block steps run on fixed buffers."""

    def __init__(
        self,
        model: Transformer,
        fmt: DialogueFormat,
        options: DecodingOptions,
        clock: Clock,
        capture: bool | None = None,
    ) -> None:
        """``capture`` (default: on CUDA) records each bucket's step in a CUDA graph;
        without it the fixed-shape step runs eagerly."""
        super().__init__(model, fmt, options, clock)
        self._capture = self.device.type == "cuda" if capture is None else capture
        self._capacity = bucket_length(model.config.max_positions)
        self._buffers = _StepBuffers.allocate(model.config, self._capacity, model.embedding.weight)
        self._synced: list[int] = []
        """Token ids whose keys and values are in the fixed buffers."""
        self._graphs: dict[int, CapturedStep[CommitDecision]] = {}

    def step(
        self,
        pending: list[int],
        block: list[int],
        masked: torch.Tensor,
        before: torch.Tensor | None,
        threshold: Callable[[], float],
    ) -> tuple[CommitDecision, torch.Tensor | None]:
        length = len(self.cache.ids)
        slots = bucket_length(length)
        if pending or slots > self._capacity:
            return super().step(pending, block, masked, before, threshold)
        if self._synced != self.cache.ids:
            self._sync_cache()
        buffers = self._buffers
        buffers.ids.copy_(torch.tensor([block]))
        buffers.positions.copy_(torch.arange(length, length + len(block))[None])
        buffers.lengths.fill_(length)
        buffers.masked.copy_(masked[None])
        buffers.first_row.fill_(before is None)
        if before is not None:
            buffers.before.copy_(before)
        # τ is read before the step here (after it in the eager decoder): the graph holds
        # the forward and the decision together.
        buffers.tau.fill_(threshold())
        decision = self._run(slots)
        commit, prediction, confidence = (part[0].clone() for part in decision)
        return CommitDecision(commit, prediction, confidence), before

    def _run(self, slots: int) -> CommitDecision:
        if not self._capture:
            return self._fixed_shape_step(slots)
        if slots not in self._graphs:
            self._graphs[slots] = CapturedStep(lambda: self._fixed_shape_step(slots))
        return self._graphs[slots].replay()

    def _fixed_shape_step(self, slots: int) -> CommitDecision:
        """The step on the fixed buffers: every shape depends on ``slots`` only."""
        buffers = self._buffers
        view = _BucketView(buffers, slots)
        visible = CachedBlock(buffers.lengths)
        logits = self.model(buffers.ids, buffers.positions, visible, view, 0)[0]
        first = torch.where(buffers.first_row, logits[0], buffers.before)
        shifted = torch.cat((first[None], logits[:-1]))
        return kernels.commit_decision(
            shifted[None], buffers.masked, buffers.tau, self._never, self._end_ids
        )

    def _sync_cache(self) -> None:
        """Copy the conversation's cache into the fixed buffers (once per block: the block's
        first step changed it)."""
        for layer in range(self.model.config.n_layers):
            cached = self.cache.kv.cached(layer)
            if cached is not None:
                keys, values = cached
                self._buffers.keys[layer][:, :, : keys.shape[2]] = keys
                self._buffers.values[layer][:, :, : values.shape[2]] = values
        self._synced = list(self.cache.ids)
