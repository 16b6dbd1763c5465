"""Decoding SmolLM2 with a Cadence adapter (``llm/adapted.py``): greedy autoregressive, or block
diffusion — with early emission, the deadline rule, tool calls, result slots and the
conversation's KV cache, the contract of the embedded decoders (``llm/autoregressive.py``,
``llm/block_diffusion.py``), so the turn engine, tracing and barge-in see no difference.

The diffusion adapter was trained as Fast-dLLM v2 trains (``tooling/training/lm_objectives.py``):
blocks of 16 counted from position 0, block-causal attention, *shifted* predictions (position
*j* from the output at *j − 1*, a block's first from the last position before it). So it is
decoded as :class:`cadence.llm.open_weights.decoder.OpenWeightsDecoder` decodes Fast-dLLM v2 —
the prompt's whole blocks prefilled and cached, its leftover tokens starting the first decode
block, commits left to right through sub-blocks of :data:`SUB_BLOCK` — with the reply's words
before a call token spoken and its calls read at the end.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import replace

import torch

from cadence import kernels
from cadence.core.clock import Clock, MonotonicClock
from cadence.kernels import CommitDecision
from cadence.llm.adapted import AdaptedModel, load_adapted
from cadence.llm.attention_masks import step_mask
from cadence.llm.chatml_tools import CALL_TOKEN, END_OF_TEXT, IM_END, MASK_TOKEN, SMOLLM2_IDS
from cadence.llm.checkpoint import CheckpointError
from cadence.llm.conversation_cache import ConversationCache
from cadence.llm.decoding import DecodingOptions, ReplyStats
from cadence.llm.emission import CallReader, ReplyPiece, WordEmitter
from cadence.llm.generator import DecoderTurnGenerator, GeneratorOptions
from cadence.llm.model import AttentionMode
from cadence.llm.options import LLMOptions
from cadence.llm.reply_loops import (
    EagerDenoising,
    diffused_reply,
    greedy_reply,
    shifted_rows,
    split_prompt,
)
from cadence.llm.result_slots import ReplyFacts, SlotFiller

SUB_BLOCK = 8
"""Commits go left to right through sub-blocks of this many positions (Fast-dLLM v2's 8)."""
CONTROL_IDS = range(17)
"""SmolLM2's control tokens (ids 0–16): a reply writes none but its end and the call token."""
CALL_LIKE = (1, *range(3, 17))
"""The control tokens whose probability is the call token's (see :func:`fold_calls`)."""


def fold_calls(logits: torch.Tensor, call: int) -> torch.Tensor:
    """``logits`` with the call token's logit the log of the summed probability of every
    unused control token (:data:`CALL_LIKE`). Why: the adapters learn to start a call with a
    control token, but a LoRA cannot separate the call token's output row from the other
    unused control tokens' (pretraining left them all near one point): trained, the AR adapter
    put the call's probability on ``<gh_stars>``, ``<file_sep>``, ``<jupyter_text>``… in turn
    (the device evaluation, 0 of 100 calls started right, every one with some control token).
    Read as one event, "a control token", it is the call the model meant; the others stay
    banned, so only the call token is written."""
    folded = logits.clone()
    folded[..., call] = torch.logsumexp(logits[..., list(CALL_LIKE)], dim=-1)
    return folded


class AdaptedDecoder:
    """What both decoders share: the network, its cache, the ids a reply may not write."""

    def __init__(self, model: AdaptedModel, options: DecodingOptions, clock: Clock) -> None:
        self.network = model.network
        self.format = model.format
        self.block_size = model.block_size
        self.options = options
        self.clock = clock
        self.cache = ConversationCache(model.network.new_cache(), model.block_size)
        self.device = model.device
        self._call = SMOLLM2_IDS[CALL_TOKEN]
        self._ends = (SMOLLM2_IDS[IM_END], SMOLLM2_IDS[END_OF_TEXT])
        self._end_ids = torch.tensor(self._ends, device=self.device)
        self.call_reader = CallReader(self._call)
        self._banned = self._never(calls=False)

    def _never(self, *, calls: bool) -> torch.Tensor:
        allowed = {*self._ends, *((self._call,) if calls else ())}
        return torch.tensor([i for i in CONTROL_IDS if i not in allowed], device=self.device)

    def allow_calls(self, allowed: bool) -> None:
        """Whether the next reply may end in calls (the call token may be written)."""
        self._banned = self._never(calls=allowed)

    @torch.inference_mode()
    def prefill(self, context: list[int]) -> None:
        """Cache the whole blocks of ``context`` ahead of the reply (while the user speaks)."""
        whole = len(context) - len(context) % self.block_size
        pending = self.cache.reuse(context[:whole])
        if pending:
            self._forward(pending, [])

    def _forward(self, pending: list[int], block: list[int]) -> torch.Tensor:
        """Logits of ``block``'s positions, after that of the position before it when
        ``pending`` holds it; ``pending`` enters the cache."""
        tokens = pending + block
        start = len(self.cache.ids)
        ids = torch.tensor([tokens], device=self.device)
        positions = torch.arange(start, start + len(tokens), device=self.device)[None]
        mode: AttentionMode = "causal" if self.block_size == 1 else "block_causal"
        allowed = step_mask(start, len(tokens), mode, self.block_size).to(self.device)
        last = max(len(block) + bool(pending), 1)
        logits: torch.Tensor = self.network(
            ids, positions, allowed, self.cache.kv, len(pending), last
        )[0]
        self.cache.ids += pending
        return logits.float()


class AdaptedARDecoder(AdaptedDecoder):
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
        """Greedy pieces of the reply to ``prompt`` (``AdaptedChatFormat.prompt``)."""
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
            call=self._call,
            calls=self.call_reader,
        )
        stats.unfilled_slots = tuple(sorted(filler.unfilled))
        stats.said_back = tuple(sorted(filler.said_back))

    def _next_token(self, pending: list[int]) -> int:
        """The greedy next token after ``pending`` (which enters the cache)."""
        logits = fold_calls(self._forward(pending, [])[-1], self._call)
        return int(logits.index_fill(0, self._banned, float("-inf")).argmax())


class AdaptedDiffusionDecoder(EagerDenoising, AdaptedDecoder):
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
        """Pieces of the reply to ``prompt``, block by block (see the module)."""
        stats = stats if stats is not None else ReplyStats()
        stats.start_ms = self.clock.now_ms()
        self.allow_calls(calls)
        pending, given = split_prompt(prompt, self.block_size, self.cache, shifted=True)
        stats.prefilled_tokens = len(pending) + len(given)
        filler = SlotFiller(self.format.tokenizer, facts or ReplyFacts())
        yield from diffused_reply(
            self,
            pending,
            given,
            mask=SMOLLM2_IDS[MASK_TOKEN],
            size=self.block_size,
            sub_block=SUB_BLOCK,
            options=self.options,
            stop=stop,
            clock=self.clock,
            stats=stats,
            emitter=WordEmitter(filler, self.clock),
            ends=self._ends,
            call=self._call,
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
        """One denoising step: a forward of ``block`` over the cache (``pending`` first, into
        the cache) and the commit decision for ``window``'s positions (indexed from its
        start). ``before``: the output of the position before the block, once carried."""
        logits = self._forward(pending, block)
        if pending:
            before = logits[0]
        rows = shifted_rows(logits, len(block), window, before)
        decision = kernels.commit_decision(
            fold_calls(rows, self._call)[None],
            masked[None, window],
            threshold(),
            self._banned,
            self._end_ids,
        )
        return (
            CommitDecision(decision.commit[0], decision.prediction[0], decision.confidence[0]),
            before,
        )


REPLY_TOKENS = 96
"""The least ``max_reply_tokens`` these models get: SmolLM2 writes each digit as a token, and
a booking call ("ReserveRestaurant date: 2019-03-01; … time: 11:30") is 50 or more."""
CONTEXT_TOKENS = 384
"""The least ``max_context_tokens``: the system message alone is ~40 tokens, and the adapters
were trained on windows of 256 (the device evaluation's prompts hold up to 384)."""
HISTORY_TURNS = 8
"""The least ``history_turns``: a call, its result and the words after it are three turns."""


def adapted_generators(
    config: LLMOptions, device: torch.device
) -> Callable[[Clock | None], DecoderTurnGenerator]:
    """The adapter ``models.llm.checkpoint`` merged into SmolLM2 once; each call of the result
    is a generator of its own (its cache) over those weights. The backend must fit the
    adapter (``dllm``: a diffusion adapter, ``ar``: an autoregressive one); the block size is
    the adapter's own (``models.llm.block_size`` is for the embedded models)."""
    model = load_adapted(config.checkpoint, device, config.precision)
    wanted = "bd" if config.backend == "dllm" else "ar"
    if model.objective != wanted:
        raise CheckpointError(
            f"models.llm.backend: {config.backend!r}, but {config.checkpoint!r} is a "
            f"{'block-diffusion' if model.objective == 'bd' else 'autoregressive'} adapter"
        )
    options = adapted_options(GeneratorOptions.from_options(config))
    kind = AdaptedDiffusionDecoder if model.objective == "bd" else AdaptedARDecoder

    def generator(clock: Clock | None) -> DecoderTurnGenerator:
        decoder = kind(model, options.decoding, clock or MonotonicClock())
        return DecoderTurnGenerator(decoder, model.format, options)

    return generator


def adapted_options(options: GeneratorOptions) -> GeneratorOptions:
    """``options`` with at least :data:`REPLY_TOKENS`, :data:`CONTEXT_TOKENS` and
    :data:`HISTORY_TURNS` (the configuration's defaults are the embedded models')."""
    decoding = replace(
        options.decoding, max_reply_tokens=max(options.decoding.max_reply_tokens, REPLY_TOKENS)
    )
    return replace(
        options,
        decoding=decoding,
        history_turns=max(options.history_turns, HISTORY_TURNS),
        max_context_tokens=max(options.max_context_tokens, CONTEXT_TOKENS),
    )
