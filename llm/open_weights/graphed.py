"""Open-weight block-diffusion decoding in fixed-shape steps, each replayed as a CUDA graph.

The eager :class:`~cadence.llm.open_weights.decoder.OpenWeightsDecoder` launches every kernel of
a 28-layer network from Python at every denoising step (about 19 ms a step for 1.5B
parameters on an H200, most of it launches). Here every forward of a reply is the same
shape — one block of tokens over the conversation's cache, padded to a bucket
(:func:`cadence.kernels.cuda_graph.bucket_length`) — so that one graph per bucket replays it:

* an **in-block step** writes the block's keys and values to scratch slots past the bucket,
  decides what commits (:func:`cadence.kernels.commit_decision`, with the positions outside
  Fast-dLLM v2's current sub-block made ineligible by a window mask, so the shape does not
  change between sub-blocks) and applies the commits to its own inputs (block ids, mask) on
  the device. The host writes τ before the replay and reads one tensor after it — what
  committed — which is the step's only synchronisation.
* a **carry** is the same graph told (by device flags) to append the block's keys and values
  to the cache's next slots and keep its last row of logits (a shifted model predicts the
  next block's first token from it). A finished block is carried before the next block's
  first step; a reply's new prompt blocks are carried one by one, or, when there are more
  than ``carry_blocks`` of them, go through one eager forward (a replay per block costs a
  read of every weight; one eager forward costs its launches once).

The cache lives in :class:`~cadence.llm.open_weights.static_cache.StaticKVCache`, whose buffers
both paths write, so there is one cache and nothing is copied between steps.

Prefill (while the caller speaks) carries the history into the cache, captures the graphs of
the buckets the next reply will use, and waits for the device to finish: the reply that
follows starts on an idle GPU with its graphs ready, so the first piece is never slower for
it. With ``capture=False`` (the default off CUDA) the same fixed-shape steps run eagerly,
which is what the CPU tests compare, token for token, with the eager decoder.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from cadence import kernels
from cadence.core.clock import Clock
from cadence.kernels import CachedBlock
from cadence.kernels.cuda_graph import CapturedStep, bucket_length
from cadence.llm.attention_masks import step_mask
from cadence.llm.conversation_cache import ConversationCache
from cadence.llm.decoding import DecodingOptions
from cadence.llm.open_weights.decoder import OpenWeightsDecoder, OpenWeightsModel
from cadence.llm.open_weights.static_cache import BucketView, StaticKVCache

CARRY_BLOCKS = 16
"""Prompt blocks carried by graph replays when not measured (off CUDA); more go through one
eager forward. On CUDA the decoder measures the limit when it is made
(:meth:`GraphedOpenWeightsDecoder.measure_carry_blocks`): the H200 run of 18:11 UTC found a
replay 3.8–4.0 ms and an eager forward 16–32 ms, so SDAR (block 4) carried a 6-block user
turn in 6 replays (~24 ms) where one eager forward costs ~17 ms."""
MEASURED_CARRY_TOKENS = 32
"""Tokens of the eager forward timed by :meth:`GraphedOpenWeightsDecoder.measure_carry_blocks`
(a user's turn: its cost hardly grows with the tokens, it is the launches)."""
AHEAD_POSITIONS = 256
"""Prefill captures the buckets of the cache up to this many positions past the reply."""


@dataclass
class _StepInputs:
    """The device tensors a captured step reads (and, for ids, mask and ``before``, writes)."""

    ids: torch.Tensor
    positions: torch.Tensor
    lengths: torch.Tensor
    """Valid cache positions."""
    write_at: torch.Tensor
    """Slots the block's keys and values are written to besides the scratch slots."""
    masked: torch.Tensor
    window: torch.Tensor
    """Positions that may commit this step (Fast-dLLM v2's sub-block)."""
    tau: torch.Tensor
    before: torch.Tensor
    """The last row of logits of the latest carried block."""
    first_row: torch.Tensor
    """``True``: no block was carried before this one; its position 0 is given."""
    carry: torch.Tensor
    """``True``: append the block to the cache and keep its last row in ``before``."""
    offsets: torch.Tensor

    @classmethod
    def allocate(
        cls, block: int, vocab: int, dtype: torch.dtype, device: torch.device
    ) -> _StepInputs:
        def zeros(*shape: int, kind: torch.dtype) -> torch.Tensor:
            return torch.zeros(shape, dtype=kind, device=device)

        return cls(
            ids=zeros(1, block, kind=torch.long),
            positions=zeros(1, block, kind=torch.long),
            lengths=zeros(1, kind=torch.long),
            write_at=zeros(block, kind=torch.long),
            masked=zeros(1, block, kind=torch.bool),
            window=zeros(1, block, kind=torch.bool),
            tau=zeros(1, kind=torch.float32),
            before=zeros(vocab, kind=dtype),
            first_row=zeros(1, kind=torch.bool),
            carry=zeros(1, kind=torch.bool),
            offsets=torch.arange(block, device=device),
        )


class GraphedOpenWeightsDecoder(OpenWeightsDecoder):
    """An :class:`OpenWeightsDecoder` whose forwards are fixed-shape one-block steps."""

    def __init__(
        self,
        model: OpenWeightsModel,
        options: DecodingOptions,
        clock: Clock,
        capture: bool | None = None,
        carry_blocks: int | None = None,
    ) -> None:
        """``capture`` (default: on CUDA) replays each bucket's step as a CUDA graph; without
        it the fixed-shape step runs eagerly. ``carry_blocks``: see the module (default:
        measured when capturing, else :data:`CARRY_BLOCKS`)."""
        super().__init__(model, options, clock)
        self._capture = self.device.type == "cuda" if capture is None else capture
        self._carry_blocks = CARRY_BLOCKS if carry_blocks is None else carry_blocks
        dtype = self.network.model.embed_tokens.weight.dtype
        self.kv = StaticKVCache(self.network.shape, self.block_size, dtype, self.device)
        self.cache = ConversationCache(self.kv, self.block_size)
        self._in = _StepInputs.allocate(
            self.block_size, self.network.shape.vocab_size, dtype, self.device
        )
        self._graphs: dict[int, CapturedStep[torch.Tensor]] = {}
        self._uploaded = torch.empty(0, dtype=torch.long, device=self.device)
        """The reply's prompt on the device, uploaded once (``decode``)."""
        self._slots = 0
        """The bucket of the block being decoded."""
        self._window: slice | None = None
        """The sub-block the step's window mask holds now."""
        self._generation = self.kv.generation
        self.forwards = 0
        """Forwards run so far (steps, carries, eager prompt forwards): the bench divides a
        reply's time by them, since a carry costs as much as a step."""
        if self._capture:
            self.warm()
            if carry_blocks is None:
                self._carry_blocks = self.measure_carry_blocks()

    @torch.inference_mode()
    def warm(self) -> None:
        """Capture the graph of every bucket the cache holds now (64 … 1,024 slots), as the
        call starts: a reply that reaches a new bucket then never captures in the caller's
        wait (a capture is two eager warm-up steps and the recording: ~0.1 s at 1.5B)."""
        slots = bucket_length(1)
        while slots + self.block_size <= self.kv.capacity:
            self._prepare(slots)
            slots *= 2
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @property
    def carry_blocks(self) -> int:
        """Prompt blocks carried by replays; more go through one eager forward."""
        return self._carry_blocks

    @torch.inference_mode()
    def measure_carry_blocks(self, repeats: int = 3) -> int:
        """How many prompt blocks replays carry before one eager forward is the cheaper: the
        median time of an eager forward of :data:`MEASURED_CARRY_TOKENS` tokens over that of
        a replay. Neither changes the cache (the forward keeps nothing; the replay writes its
        scratch slots only) nor the inputs' meaning (a reply writes them all)."""
        slots = bucket_length(self.kv.length + self.block_size)
        self._prepare(slots)
        inputs = self._in
        inputs.masked.zero_()
        self._set_block(slots, carry=False)
        tokens = MEASURED_CARRY_TOKENS
        start = self.kv.length
        ids = torch.full((1, tokens), self._mask, device=self.device)
        positions = torch.arange(start, start + tokens, device=self.device)[None]
        allowed = step_mask(start, tokens, "block_causal", self.block_size).to(self.device)

        def replay() -> None:
            self._replay(slots)
            self.forwards -= 1  # not a reply's

        def eager() -> None:
            self.network(ids, positions, allowed, self.kv, 0, 1)

        replay_ms, eager_ms = (self._median_ms(run, repeats) for run in (replay, eager))
        return max(1, int(eager_ms / max(replay_ms, 1e-6)))

    def _median_ms(self, run: Callable[[], None], repeats: int) -> float:
        run()  # warm-up
        times = []
        for _ in range(repeats):
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            started = time.perf_counter()
            run()
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            times.append(1000 * (time.perf_counter() - started))
        return sorted(times)[len(times) // 2]

    # --- the fixed-shape step ------------------------------------------------------------

    def _fixed_step(self, slots: int) -> torch.Tensor:
        """One block over ``slots`` cache slots; every shape depends on ``slots`` only.
        Returns ``[block]``: the committed token per position, −1 where none committed."""
        inputs = self._in
        view = BucketView(self.kv, slots, inputs.write_at)
        logits = self.network(inputs.ids, inputs.positions, CachedBlock(inputs.lengths), view, 0)
        logits = logits[0]
        if self.family.shifted:  # position j is predicted by position j - 1's output
            first = torch.where(inputs.first_row, logits[0], inputs.before)
            rows = torch.cat((first[None], logits[:-1]))
        else:
            rows = logits
        decision = kernels.commit_decision(
            rows[None], inputs.masked & inputs.window, inputs.tau, self._banned, self._stop_ids
        )
        inputs.before.copy_(torch.where(inputs.carry, logits[-1], inputs.before))
        inputs.ids.copy_(torch.where(decision.commit, decision.prediction, inputs.ids))
        inputs.masked.copy_(inputs.masked & ~decision.commit)
        return torch.where(decision.commit[0], decision.prediction[0], -1)

    def _replay(self, slots: int) -> torch.Tensor:
        self.forwards += 1
        if not self._capture:
            return self._fixed_step(slots)
        return self._graphs[slots].replay()

    def _prepare(self, slots: int) -> None:
        """Room in the cache for ``slots`` and, when capturing, the bucket's graph. Capture
        runs the step (its warm-up) with nothing masked, no carry and the block written to
        the scratch slots only, so it changes neither the cache nor the inputs' meaning; the
        caller writes the step's inputs after this."""
        self.kv.reserve(slots)
        if self.kv.generation != self._generation:  # new buffers: every graph reads old ones
            self._graphs.clear()
            self._generation = self.kv.generation
        if not self._capture or slots in self._graphs:
            return
        inputs = self._in
        inputs.masked.zero_()
        inputs.carry.zero_()
        inputs.lengths.zero_()
        torch.add(inputs.offsets, slots, out=inputs.write_at)
        self._graphs[slots] = CapturedStep(lambda: self._fixed_step(slots))

    def _set_block(self, slots: int, carry: bool) -> None:
        """The inputs shared by a block's steps: where it is, what the cache holds, whether
        the step carries it."""
        inputs, length = self._in, self.kv.length
        torch.add(inputs.offsets, length, out=inputs.positions[0])
        inputs.lengths.fill_(length)
        torch.add(inputs.offsets, length if carry else slots, out=inputs.write_at)
        inputs.carry.fill_(carry)

    # --- carrying blocks into the cache --------------------------------------------------

    def _carry(self, tokens: list[int], uploaded: torch.Tensor | None = None) -> None:
        """Append ``tokens`` (whole blocks, starting at a block boundary) to the cache, and
        keep the logits row of their last position in ``before``."""
        if not tokens:
            return
        size, inputs = self.block_size, self._in
        if len(tokens) > self._carry_blocks * size:
            logits = self._forward(tokens, [])
            self.forwards += 1
            inputs.before.copy_(logits[-1])
            return
        on_device = torch.tensor(tokens, device=self.device) if uploaded is None else uploaded
        inputs.masked.zero_()
        for start in range(0, len(tokens), size):
            slots = bucket_length(self.kv.length + size)
            self._prepare(slots)
            inputs.ids[0].copy_(on_device[start : start + size])
            self._set_block(slots, carry=True)
            self._replay(slots)
            self.kv.advance(size)
            self.cache.ids += tokens[start : start + size]

    @torch.inference_mode()
    def prefill(self, context: list[int]) -> None:
        """Cache the whole blocks of ``context``, capture the graphs of the buckets the next
        reply will use, and wait for the device, all while the caller speaks."""
        whole = len(context) - len(context) % self.block_size
        self._carry(self.cache.reuse(context[:whole]))
        reply = self.options.max_reply_tokens + 2 * self.block_size
        ahead = range(self.kv.length, self.kv.length + reply + AHEAD_POSITIONS + 1, 64)
        buckets = sorted({bucket_length(length) for length in ahead})
        self.kv.reserve(buckets[-1])  # first: growing the cache later would drop the graphs
        for slots in buckets:
            self._prepare(slots)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # --- a reply -------------------------------------------------------------------------

    def _begin_reply(self, pending: list[int], given: list[int]) -> None:
        # One upload for the whole prompt: the carries and the first block copy from it.
        self._uploaded = torch.tensor(pending + given, device=self.device)

    def begin_block(self, index: int, pending: list[int], start: int) -> None:
        """Carry ``pending`` into the cache (a finished block is already in the step's ids,
        committed on the device) and write the block's inputs: its given tokens, its mask,
        where it is."""
        inputs, uploaded = self._in, self._uploaded
        self._carry(pending, uploaded[: len(pending)] if index == 0 else inputs.ids[0])
        self._slots = bucket_length(self.kv.length)
        self._prepare(self._slots)
        inputs.ids.fill_(self._mask)
        if start:
            inputs.ids[0, :start].copy_(uploaded[len(pending) :])
        torch.ge(inputs.offsets, start, out=inputs.masked[0])
        inputs.first_row.fill_(not pending)
        self._set_block(self._slots, carry=False)
        self._window = None

    def commits(
        self,
        block: list[int],
        masked: list[bool],
        window: slice,
        threshold: Callable[[], float],
    ) -> list[tuple[int, int]]:
        """One replay: the step's forward, decision and commits on the device, and one read
        of what it committed. τ is read before the step here (after it in the eager decoder):
        the graph holds the forward and the decision together."""
        inputs = self._in
        if window != self._window:
            inputs.window.zero_()
            inputs.window[0, window] = True
            self._window = window
        inputs.tau.fill_(threshold())
        committed = self._replay(self._slots).tolist()  # the step's one read
        return [(position, token) for position, token in enumerate(committed) if token >= 0]

    @torch.inference_mode()
    def timed_step(self, threshold: float) -> list[int]:
        """A reply's first in-block step on the cached context (a fully masked block after
        it), read back as decoding reads it: the unit the GPU bench times. The cache is left
        as it was."""
        slots = bucket_length(self.kv.length)
        self._prepare(slots)
        inputs = self._in
        inputs.ids.fill_(self._mask)
        inputs.masked.fill_(True)
        inputs.window.fill_(True)
        inputs.first_row.fill_(False)
        inputs.tau.fill_(threshold)
        self._set_block(slots, carry=False)
        committed: list[int] = self._replay(slots).tolist()
        return committed
