"""Block-wise decoding of the diffusion model, with an exact KV cache and early emission.

A reply is produced one block at a time. A block starts fully masked (the first one holds the
given ``<agent>`` token) and each denoising step is one forward over the block on top of the
cache; :func:`cadence.kernels.commit_decision` decides what it commits (the rule:
:mod:`cadence.llm.commit_rule`). The forward of a
block's first step also carries the previous block (or the new context), whose keys and values
then enter the cache: a finished block costs no extra forward.
Predictions are shifted, as the model was trained (``cadence.tooling.training.objectives``): a
block's first token comes from the last position of the block before it. The loop over
blocks and steps is every diffusion decoder's (:func:`cadence.llm.reply_loops.diffused_reply`);
what is this model's is its step.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import torch

from cadence import kernels
from cadence.kernels import CommitDecision
from cadence.llm.attention_masks import step_mask
from cadence.llm.cached_decoder import CachedDecoder
from cadence.llm.decoding import ReplyStats
from cadence.llm.emission import ReplyPiece, WordEmitter
from cadence.llm.reply_loops import EagerDenoising, diffused_reply
from cadence.llm.result_slots import ReplyFacts, SlotFiller


class BlockDiffusionDecoder(EagerDenoising, CachedDecoder):
    attention = "block_causal"

    def _prefill(self, tokens: list[int]) -> None:
        self._forward(tokens, [], keep=len(tokens))

    @torch.inference_mode()
    def decode(
        self,
        prompt: list[int],
        stats: ReplyStats | None = None,
        *,
        calls: bool = False,
        facts: ReplyFacts | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[ReplyPiece]:
        """Pieces of the reply to ``prompt`` (from :meth:`DialogueFormat.prompt`); with
        ``calls``, the reply may end in tool calls (a model that knows tools), and its
        result slots are filled, and its dates and times checked, from ``facts``
        (:meth:`DialogueFormat.reply_facts`)."""
        stats = stats if stats is not None else ReplyStats()
        stats.start_ms = self.clock.now_ms()
        self.allow_calls(calls)
        special = self.format.tokenizer.special
        filler = SlotFiller(self.format.tokenizer, facts or ReplyFacts())
        pending = self.cache.reuse(prompt[:-1])
        stats.prefilled_tokens = len(pending)
        size = self.model.config.block_size
        yield from diffused_reply(
            self,
            pending,
            [special.agent],
            mask=special.mask,
            size=size,
            sub_block=size,
            options=self.options,
            stop=stop,
            clock=self.clock,
            stats=stats,
            emitter=WordEmitter(filler, self.clock),
            ends=self._ends,
            call=special.call,
            calls=self.call_reader,
        )
        stats.unfilled_slots = tuple(sorted(filler.unfilled))
        stats.said_back = tuple(sorted(filler.said_back))

    def decide(
        self,
        pending: list[int],
        block: list[int],
        masked: torch.Tensor,
        window: slice,
        before: torch.Tensor | None,
        threshold: Callable[[], float],
    ) -> tuple[CommitDecision, torch.Tensor | None]:
        """:meth:`step`: this model commits anywhere in its block (one window)."""
        return self.step(pending, block, masked, before, threshold)

    def step(
        self,
        pending: list[int],
        block: list[int],
        masked: torch.Tensor,
        before: torch.Tensor | None,
        threshold: Callable[[], float],
    ) -> tuple[CommitDecision, torch.Tensor | None]:
        """One denoising step (the unit the kernel benchmark times): a forward of ``block`` on
        top of the cache (``pending`` goes first and enters the cache) and the commit
        decision for the block's positions.
        ``before`` is the logits row that predicts the block's position 0, once a forward has
        carried the position before the block; the step returns it for the next one.
        ``threshold`` gives τ once the forward is done (a late step commits more)."""
        logits = self._forward(pending, block, keep=len(pending))
        if pending:
            before = logits[len(pending) - 1]
        # Output j-1 predicts position j; a block's position 0 from the block before
        # (the first block's position 0 is the given <agent>, so any row will do).
        first = logits[0] if before is None else before
        shifted = torch.cat((first[None], logits[-len(block) : -1]))
        decision = kernels.commit_decision(
            shifted[None], masked[None], threshold(), self._never, self._end_ids
        )
        return (
            CommitDecision(decision.commit[0], decision.prediction[0], decision.confidence[0]),
            before,
        )

    def _forward(self, pending: list[int], block: list[int], keep: int) -> torch.Tensor:
        """Logits ``[len(pending) + len(block), vocab]``; ``pending`` enters the cache."""
        tokens = pending + block
        start = len(self.cache.ids)
        ids = torch.tensor([tokens], device=self.device)
        positions = torch.arange(start, start + len(tokens), device=self.device)[None]
        allowed = step_mask(start, len(tokens), "block_causal", self.model.config.block_size)
        logits: torch.Tensor = self.model(
            ids, positions, allowed.to(self.device), self.cache.kv, keep
        )[0]
        self.cache.ids += pending[:keep]
        return logits
