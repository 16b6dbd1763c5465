"""Greedy decoding of the AR baseline, token by token on an exact KV cache, with the same
pieces, statistics and conversation cache as the diffusion decoder so the two compare fairly."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from llm.attention_masks import step_mask
from llm.conversation_cache import ConversationCache
from llm.decoding import DecodingOptions, ReplyStats, never_in_reply
from llm.dialogue_format import DialogueFormat
from llm.emission import ReplyPiece, WordEmitter
from llm.model import Transformer
from pipeline.clock import Clock


class AutoregressiveDecoder:
    def __init__(
        self,
        model: Transformer,
        fmt: DialogueFormat,
        options: DecodingOptions,
        clock: Clock,
    ) -> None:
        if model.config.attention != "causal":
            raise ValueError("the autoregressive decoder needs a causal model")
        self.model = model
        self.format = fmt
        self.options = options
        self.clock = clock
        self.cache = ConversationCache(model)
        special = fmt.tokenizer.special
        self._ends = (special.end_of_turn, special.pad)
        self._never = never_in_reply(special)

    @torch.inference_mode()
    def prefill(self, context: list[int]) -> None:
        """Cache ``context`` (whole turns) ahead of the reply, e.g. while the user speaks."""
        pending = self.cache.reuse(context)
        if pending:
            self._forward(pending)

    @torch.inference_mode()
    def decode(self, prompt: list[int], stats: ReplyStats | None = None) -> Iterator[ReplyPiece]:
        """Pieces of the reply to ``prompt`` (from :meth:`DialogueFormat.prompt`)."""
        stats = stats if stats is not None else ReplyStats()
        stats.start_ms = self.clock.now_ms()
        emitter = WordEmitter(self.format.tokenizer, self.clock)
        pending = [*self.cache.reuse(prompt[:-1]), prompt[-1]]
        stats.prefilled_tokens = len(pending) - 1
        reply: list[int] = []
        while len(reply) < self.options.max_reply_tokens:
            token = int(
                self._forward(pending)[-1].index_fill(0, self._never, float("-inf")).argmax()
            )
            stats.steps_per_block.append(1)
            if token in self._ends:
                break
            reply.append(token)
            pending = [token]
            piece = emitter.update(reply)
            if piece is not None:
                stats.first_piece_ms = stats.first_piece_ms or piece.at_ms
                yield piece
        stats.token_ids = reply
        last = emitter.finish(reply)
        if last is not None:
            stats.first_piece_ms = stats.first_piece_ms or last.at_ms
            yield last
        stats.text = emitter.text
        stats.end_ms = self.clock.now_ms()

    def _forward(self, tokens: list[int]) -> torch.Tensor:
        """Logits ``[len(tokens), vocab]``; every token enters the cache."""
        start = len(self.cache.ids)
        ids = torch.tensor([tokens])
        positions = torch.arange(start, start + len(tokens))[None]
        allowed = step_mask(start, len(tokens), "causal", self.model.config.block_size)
        logits: torch.Tensor = self.model(ids, positions, allowed, self.cache.kv)[0]
        self.cache.ids += tokens
        return logits
