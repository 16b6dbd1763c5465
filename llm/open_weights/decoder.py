"""Block-diffusion decoding of an open-weight checkpoint, with the conversation's KV cache and
early emission — the same contract as :class:`cadence.llm.block_diffusion.BlockDiffusionDecoder`, so
the turn engine, tracing and barge-in see no difference.

Blocks are counted from position 0 of the conversation, as the checkpoints were trained: the
prompt's whole blocks are prefilled with block-causal attention (and cached), the prompt
tokens left over start the first decode block, and the reply fills the rest of it and the
blocks after it. Each denoising step is one forward of the current block over the cache; its
first step also carries the tokens not cached yet (the previous block, or the prompt), which
then enter the cache. :func:`cadence.kernels.commit_decision` commits every masked position at least
τ confident and at least the most confident one (:mod:`cadence.llm.commit_rule`); a block running
late lowers τ (:func:`cadence.llm.commit_rule.deadline_threshold`). Fast-dLLM v2 commits sub-block
by sub-block, left to right, as its reference decoder does. A reply ends at the first stop token
committed with nothing masked before it; the contiguous committed prefix goes out at word
boundaries (:class:`cadence.llm.emission.WordEmitter`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from cadence import kernels
from cadence.core.clock import Clock
from cadence.kernels import CommitDecision
from cadence.llm.attention_masks import step_mask
from cadence.llm.conversation_cache import ConversationCache
from cadence.llm.decoding import DecodingOptions, ReplyStats
from cadence.llm.emission import ReplyPiece, WordEmitter
from cadence.llm.open_weights.chat import ChatFormat
from cadence.llm.open_weights.families import IM_START, QWEN_CONTROL_IDS, STOP_TOKENS, Family
from cadence.llm.open_weights.network import QwenForCausalLM
from cadence.llm.reply_loops import EagerDenoising, diffused_reply, shifted_rows, split_prompt
from cadence.llm.result_slots import ReplyFacts


def never_predicted(vocab_size: int, known_ids: Sequence[int], mask_id: int) -> torch.Tensor:
    """Boolean mask ``[vocab_size]`` of the ids a reply never holds: the mask, a new message,
    and the ids the tokenizer cannot decode (the vocabulary is padded past the tokenizer's,
    e.g. 151,936 rows for 151,665 ids). A mask, not a list of ids: the commit kernel reads
    one flag per logit, whatever their number."""
    decodable = torch.zeros(vocab_size, dtype=torch.bool)
    decodable[list(known_ids)] = True
    decodable[[mask_id, QWEN_CONTROL_IDS[IM_START]]] = False
    return ~decodable


@dataclass
class OpenWeightsModel:
    """A loaded model directory: the network, its chat format and the family's facts."""

    network: QwenForCausalLM
    chat: ChatFormat
    family: Family
    block_size: int


class OpenWeightsDecoder(EagerDenoising):
    def __init__(self, model: OpenWeightsModel, options: DecodingOptions, clock: Clock) -> None:
        self.network = model.network
        self.chat = model.chat
        self.family = model.family
        self.block_size = model.block_size
        self.sub_block = model.family.sub_block or model.block_size
        self.options = options
        self.clock = clock
        self.cache = ConversationCache(model.network.new_cache(), model.block_size)
        self.device = model.network.model.embed_tokens.weight.device
        self._mask = model.family.mask_id
        self._stops = tuple(QWEN_CONTROL_IDS[token] for token in STOP_TOKENS)
        self._stop_ids = torch.tensor(self._stops, device=self.device)
        self._banned = never_predicted(
            model.network.shape.vocab_size, model.chat.tokenizer.known_ids(), self._mask
        ).to(self.device)

    @torch.inference_mode()
    def prefill(self, context: list[int]) -> None:
        """Cache the whole blocks of ``context`` ahead of the reply (while the user speaks)."""
        whole = len(context) - len(context) % self.block_size
        pending = self.cache.reuse(context[:whole])
        if pending:
            self._forward(pending, [])

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
        """Pieces of the reply to ``prompt`` (from :meth:`ChatFormat.prompt`). These models
        are offered no tools: ``calls`` and ``facts`` change nothing."""
        stats = stats if stats is not None else ReplyStats()
        stats.start_ms = self.clock.now_ms()
        pending, given = split_prompt(
            prompt, self.block_size, self.cache, shifted=self.family.shifted
        )
        stats.prefilled_tokens = len(pending) + len(given)
        self._begin_reply(pending, given)
        yield from diffused_reply(
            self,
            pending,
            given,
            mask=self._mask,
            size=self.block_size,
            sub_block=self.sub_block,
            options=self.options,
            stop=stop,
            clock=self.clock,
            stats=stats,
            emitter=WordEmitter(self.chat.tokenizer, self.clock),
            ends=self._stops,
        )

    def _begin_reply(self, pending: list[int], given: list[int]) -> None:
        """The prompt is split (``pending`` for the cache, ``given`` the first block's): a
        subclass readies what its steps read (the graphed decoder uploads it once)."""

    def decide(
        self,
        pending: list[int],
        block: list[int],
        masked: torch.Tensor,
        window: slice,
        before: torch.Tensor | None,
        threshold: Callable[[], float],
    ) -> tuple[CommitDecision, torch.Tensor | None]:
        """One denoising step: a forward of ``block`` over the cache (``pending`` goes first
        and enters the cache) and the commit decision for the positions of ``window`` (the
        positions before it are all committed), indexed from the window's start.
        ``before`` is the logits row of the position before the block (shifted models
        predict the block's first token from it), kept from the forward that carried it."""
        logits = self._forward(pending, block)
        if not self.family.shifted:  # row j is position j's output
            rows = logits[-len(block) :][window]
        else:
            if pending:
                before = logits[0]
            rows = shifted_rows(logits, len(block), window, before)
        decision = kernels.commit_decision(
            rows[None], masked[None, window], threshold(), self._banned, self._stop_ids
        )
        return (
            CommitDecision(decision.commit[0], decision.prediction[0], decision.confidence[0]),
            before,
        )

    def _forward(self, pending: list[int], block: list[int]) -> torch.Tensor:
        """A forward of ``pending + block`` with block-causal attention (``pending`` enters the
        cache): the logits of the block's positions, after that of the position before it
        when ``pending`` holds it."""
        tokens = pending + block
        start = len(self.cache.ids)
        ids = torch.tensor([tokens], device=self.device)
        positions = torch.arange(start, start + len(tokens), device=self.device)[None]
        allowed = step_mask(start, len(tokens), "block_causal", self.block_size).to(self.device)
        last = len(block) + bool(pending)
        logits: torch.Tensor = self.network(
            ids, positions, allowed, self.cache.kv, len(pending), last
        )[0]
        self.cache.ids += pending
        return logits
