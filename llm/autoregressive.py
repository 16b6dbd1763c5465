"""Greedy decoding of the AR baseline, token by token on an exact KV cache, with the same
pieces, statistics and conversation cache as the diffusion decoder so the two compare fairly."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import torch

from cadence.llm.attention_masks import step_mask
from cadence.llm.cached_decoder import CachedDecoder
from cadence.llm.decoding import ReplyStats
from cadence.llm.emission import ReplyPiece, WordEmitter
from cadence.llm.reply_loops import greedy_reply
from cadence.llm.result_slots import ReplyFacts, SlotFiller


class AutoregressiveDecoder(CachedDecoder):
    attention = "causal"

    def _prefill(self, tokens: list[int]) -> None:
        self._forward(tokens)

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
        filler = SlotFiller(self.format.tokenizer, facts or ReplyFacts())
        pending = [*self.cache.reuse(prompt[:-1]), prompt[-1]]
        stats.prefilled_tokens = len(pending) - 1
        yield from greedy_reply(
            self._next_token,
            pending,
            options=self.options,
            stop=stop,
            clock=self.clock,
            stats=stats,
            emitter=WordEmitter(filler, self.clock),
            ends=self._ends,
            call=self.format.tokenizer.special.call,
            calls=self.call_reader,
        )
        stats.unfilled_slots = tuple(sorted(filler.unfilled))
        stats.said_back = tuple(sorted(filler.said_back))

    def _forward(self, tokens: list[int]) -> torch.Tensor:
        """Logits ``[len(tokens), vocab]``; every token enters the cache."""
        start = len(self.cache.ids)
        ids = torch.tensor([tokens])
        positions = torch.arange(start, start + len(tokens))[None]
        allowed = step_mask(start, len(tokens), "causal", self.model.config.block_size)
        logits: torch.Tensor = self.model(ids, positions, allowed, self.cache.kv)[0]
        self.cache.ids += tokens
        return logits

    def _next_token(self, pending: list[int]) -> int:
        """The greedy next token after ``pending`` (which enters the cache)."""
        logits = self._forward(pending)[-1]
        return int(logits.index_fill(0, self._never, float("-inf")).argmax())
