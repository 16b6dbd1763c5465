"""Block-wise decoding of the diffusion model, with an exact KV cache and early emission.

A reply is produced one block at a time. A block starts fully masked (the first one holds the
given ``<agent>`` token) and each denoising step is one forward over the block on top of the
cache; :func:`cadence.kernels.commit_decision` decides what it commits (the rule:
:mod:`cadence.llm.commit_rule`). The forward of a
block's first step also carries the previous block (or the new context), whose keys and values
then enter the cache: a finished block costs no extra forward.
Predictions are shifted, as the model was trained (``cadence.tooling.training.objectives``): a
block's first token comes from the last position of the block before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from cadence import kernels
from cadence.core.clock import Clock
from cadence.kernels import CommitDecision
from cadence.llm.attention_masks import step_mask
from cadence.llm.cached_decoder import CachedDecoder
from cadence.llm.commit_rule import deadline_threshold
from cadence.llm.decoding import DecodingOptions, ReplyStats
from cadence.llm.emission import CallReader, ReplyPiece, WordEmitter, last_pieces, spoken_part
from cadence.llm.result_slots import ReplyFacts, SlotFiller


class BlockDiffusionDecoder(CachedDecoder):
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
    ) -> Iterator[ReplyPiece]:
        """Pieces of the reply to ``prompt`` (from :meth:`DialogueFormat.prompt`); with
        ``calls``, the reply may end in tool calls (a model that knows tools), and its
        result slots are filled, and its dates and times checked, from ``facts``
        (:meth:`DialogueFormat.reply_facts`)."""
        stats = stats if stats is not None else ReplyStats()
        stats.start_ms = self.clock.now_ms()
        self.allow_calls(calls)
        special = self.format.tokenizer.special
        block_size = self.model.config.block_size
        filler = SlotFiller(self.format.tokenizer, facts or ReplyFacts())
        emitter = WordEmitter(filler, self.clock)
        pending = self.cache.reuse(prompt[:-1])
        stats.prefilled_tokens = len(pending)
        reply: list[int] = []
        blocks = -(-(self.options.max_reply_tokens + 1) // block_size)
        finished = False
        for index in range(blocks):
            block = [special.mask] * block_size
            masked = torch.ones(block_size, dtype=torch.bool, device=self.device)
            if index == 0:
                block[0] = special.agent
                masked[0] = False
            budget = (
                self.options.first_emit_budget_ms if index == 0 else self.options.block_budget_ms
            )
            block_start = stats.start_ms if index == 0 else self.clock.now_ms()
            before: torch.Tensor | None = None
            steps = 0
            while bool(masked.any()):
                threshold = block_threshold(self.options, self.clock, block_start, budget)
                decision, before = self.step(pending, block, masked, before, threshold)
                pending = []
                predicted = decision.prediction.tolist()
                for position in decision.commit.nonzero().flatten().tolist():
                    block[position] = predicted[position]
                masked &= ~decision.commit
                steps += 1
                offset = 1 if index == 0 else 0
                piece, finished = emit_committed(
                    emitter,
                    stats,
                    reply + block[offset:],
                    [False] * len(reply) + masked[offset:].tolist(),
                    self._ends,
                    self.options.max_reply_tokens,
                    special.call,
                )
                if piece is not None:
                    yield piece
                if finished:
                    break
            stats.steps_per_block.append(steps)
            reply += block[1:] if index == 0 else block
            pending = block
            if finished:
                break
        yield from final_pieces(
            emitter, stats, reply, self._ends, self.options.max_reply_tokens, self.clock,
            self.call_reader,
        )  # fmt: skip
        stats.unfilled_slots = tuple(sorted(filler.unfilled))
        stats.said_back = tuple(sorted(filler.said_back))

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


def block_threshold(
    options: DecodingOptions, clock: Clock, block_start: float, budget_ms: float
) -> Callable[[], float]:
    """τ for a block that started at ``block_start`` with ``budget_ms``, read when called (after
    the step's forward, so a late step commits more)."""
    return lambda: deadline_threshold(
        options.confidence_threshold, clock.now_ms() - block_start, budget_ms
    )


def emit_committed(
    emitter: WordEmitter,
    stats: ReplyStats,
    tokens: list[int],
    masked: list[bool],
    ends: tuple[int, ...],
    limit: int,
    call: int | None = None,
) -> tuple[ReplyPiece | None, bool]:
    """After a step: the piece with the new complete words of the reply's committed prefix
    (``None`` if there are none) — the words before a ``call``, if the reply makes one — and
    whether the reply is over (it ended, or reached ``limit`` tokens)."""
    text, finished = committed_prefix(tokens, masked, ends)
    text = text[:limit]
    piece = emitter.update(spoken_part(text, call))
    if piece is not None:
        stats.first_piece_ms = stats.first_piece_ms or piece.at_ms
    return piece, finished or len(text) == limit


def final_pieces(
    emitter: WordEmitter,
    stats: ReplyStats,
    reply: list[int],
    ends: tuple[int, ...],
    limit: int,
    clock: Clock,
    calls: CallReader | None = None,
) -> Iterator[ReplyPiece]:
    """The end of a reply whose blocks are done: the piece left unsaid, if any, and the
    reply's final tokens, text and end time in ``stats``."""
    stats.token_ids = committed_prefix(reply, [False] * len(reply), ends)[0][:limit]
    yield from last_pieces(emitter, stats, calls, clock)


def committed_prefix(
    tokens: list[int], masked: list[bool], ends: tuple[int, ...]
) -> tuple[list[int], bool]:
    """The text tokens before the first masked position or end of turn, and whether the
    reply ended there (an end of turn or padding with nothing masked to its left)."""
    prefix: list[int] = []
    for token, is_masked in zip(tokens, masked, strict=True):
        if is_masked:
            return prefix, False
        if token in ends:
            return prefix, True
        prefix.append(token)
    return prefix, False
