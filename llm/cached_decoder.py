"""``CachedDecoder``: what the diffusion decoder and the AR baseline share — the model and its
dialogue format, the decoding options, the session clock and the conversation's KV cache —
so that the two differ only in how they produce a reply."""

from __future__ import annotations

from typing import ClassVar

import torch

from cadence.core.clock import Clock
from cadence.llm.conversation_cache import ConversationCache
from cadence.llm.decoding import DecodingOptions, forbid_calls, never_in_reply
from cadence.llm.dialogue_format import DialogueFormat
from cadence.llm.emission import CallReader
from cadence.llm.model import AttentionMode, Transformer


class CachedDecoder:
    attention: ClassVar[AttentionMode]
    """The attention mode the decoder's model must have been trained with."""

    def __init__(
        self,
        model: Transformer,
        fmt: DialogueFormat,
        options: DecodingOptions,
        clock: Clock,
    ) -> None:
        if model.config.attention != self.attention:
            raise ValueError(f"{type(self).__name__} needs a {self.attention} model")
        self.model = model
        self.format = fmt
        self.options = options
        self.clock = clock
        self.cache = ConversationCache(model.new_cache(), model.config.block_size)
        self.device = model.embedding.weight.device
        """Where the model's weights are; every tensor a decoder builds goes there."""
        special = fmt.tokenizer.special
        self._ends = (special.end_of_turn, special.pad)
        self._end_ids = torch.tensor(self._ends, device=self.device)
        self._never = never_in_reply(special).to(self.device)
        self.call_reader = CallReader(special.call)
        """Reads the calls a reply ends with; numbers them across the conversation."""

    def allow_calls(self, allowed: bool) -> None:
        """Whether the next reply may call tools (only a model that knows tools can)."""
        forbid_calls(self._never, self.format.tokenizer.special, not allowed)

    @torch.inference_mode()
    def prefill(self, context: list[int]) -> None:
        """Cache ``context`` (whole turns) ahead of the reply, e.g. while the user speaks."""
        pending = self.cache.reuse(context)
        if pending:
            self._prefill(pending)

    def _prefill(self, tokens: list[int]) -> None:
        """Run ``tokens`` (clean context) through the model into the cache."""
        raise NotImplementedError
