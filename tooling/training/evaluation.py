"""``cadence eval-lm``: the diffusion model and the AR baseline measured side by side.

Per backend: the validation NLL per agent token (the ELBO bound for the diffusion model) and
its perplexity; generated agent turns against the references (sacrebleu BLEU), each turn
generated from the real history with the conversation cache carried through the dialogue as
in a call; the time to the first emitted piece, time per reply, tokens per second and, for
the diffusion model, denoising steps per block. On the SGD tool corpora, with a model that
knows tools, every agent turn is generated with tools allowed: a turn where the corpus's
agent called a service is scored as a call (exact match), the others as words (BLEU), and
every spoken reply is checked for invented entities (``tool_evaluation``).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import sacrebleu
import torch

from cadence.core.clock import MonotonicClock
from cadence.core.stats import percentile
from cadence.llm.autoregressive import AutoregressiveDecoder
from cadence.llm.block_diffusion import BlockDiffusionDecoder
from cadence.llm.checkpoint import LoadedModel
from cadence.llm.decoding import ReplyStats
from cadence.llm.dialogue import Turn
from cadence.llm.emission import ReplyPiece
from cadence.llm.generator import GeneratorOptions, PromptFormat
from cadence.llm.result_slots import ReplyFacts
from cadence.pipeline.tools.sgd_services import packaged_catalogue
from cadence.tooling.training.corpus import Dialogue
from cadence.tooling.training.in_lane import behaves, lane_kind
from cadence.tooling.training.objectives import collate
from cadence.tooling.training.tool_evaluation import ToolUseTally, grounded_call
from cadence.tooling.training.trainer import Objective, loss_function, windows_to_batches

ELBO_SAMPLES = 4
"""Noise draws averaged for the diffusion model's ELBO."""


@dataclass(frozen=True)
class BackendReport:
    backend: str
    checkpoint: str
    replies: int
    nll_per_token: float
    perplexity: float
    bleu: float
    first_piece_ms_p50: float
    first_piece_ms_p95: float
    reply_ms_p50: float
    reply_ms_p95: float
    ms_per_token_p50: float
    tokens_per_s: float
    reply_tokens_mean: float
    steps_per_block_mean: float | None
    tokens_per_step_mean: float
    ms_per_step_p50: float
    """Reply time over forward passes: what one denoising step (or AR token) costs."""
    samples: list[dict[str, str]]
    tools: dict[str, float | int | None]
    """Tool use (``ToolUseTally.summary``): call exact match, hallucinated entities…"""
    call_misses: list[dict[str, str]]
    hallucinations: list[dict[str, str]]
    lane: dict[str, float | None]
    """Share of the turns that call for it where the reply greets, says what the agent can
    do, declines, or asks again (``in_lane``), by kind."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def validation_nll(loaded: LoadedModel, dialogues: Sequence[Dialogue]) -> float:
    """Mean NLL per agent text/end-of-turn token, in nats (ELBO bound for the diffusion
    model, averaged over :data:`ELBO_SAMPLES` noise draws with the full ``(0, 1)`` range)."""
    fmt = loaded.format
    objective: Objective = "ar" if loaded.model.config.attention == "causal" else "bd3"
    rng = random.Random(0)
    windows = [
        w
        for d in dialogues
        for w in fmt.windows(fmt.encode_turns(fmt.visible(d.turns)), 192, 6, rng)
    ]
    batches = [
        collate(b, fmt.tokenizer.special.pad) for b in windows_to_batches(windows, 4096, rng)
    ]
    loss_fn = loss_function(objective, fmt, (0.0, 1.0))
    draws = 1 if objective == "ar" else ELBO_SAMPLES
    nll, tokens = 0.0, 0
    with torch.inference_mode():
        for draw in range(draws):
            torch.manual_seed(draw)
            for batch in batches:
                result = loss_fn(loaded.model, batch)
                nll += result.nll_sum
                tokens += result.tokens
    return nll / max(tokens, 1)


def evaluate_backend(
    backend: str,
    checkpoint: str,
    loaded: LoadedModel,
    options: GeneratorOptions,
    dialogues: Sequence[Dialogue],
    on_reply: Callable[[], None] | None = None,
    lexicon: frozenset[str] = frozenset(),
) -> BackendReport:
    """Generate every agent turn of ``dialogues`` and measure it (see module docstring);
    ``lexicon``: the entities a reply must not invent (``entity_lexicon``)."""
    clock = MonotonicClock()
    return measure_replies(
        backend,
        checkpoint,
        lambda: _decoder(loaded, options, clock),
        loaded.format,
        options,
        dialogues,
        calls=loaded.tokenizer.knows_tools,
        diffusion=loaded.model.config.attention == "block_causal",
        nll=lambda: validation_nll(loaded, dialogues),
        on_reply=on_reply,
        lexicon=lexicon,
    )


def measure_replies(
    backend: str,
    checkpoint: str,
    new_decoder: Callable[[], _Decoder],
    fmt: PromptFormat,
    options: GeneratorOptions,
    dialogues: Sequence[Dialogue],
    *,
    calls: bool,
    diffusion: bool,
    nll: Callable[[], float],
    on_reply: Callable[[], None] | None = None,
    lexicon: frozenset[str] = frozenset(),
) -> BackendReport:
    """:func:`evaluate_backend` for any local model: ``new_decoder`` makes a decoder with a
    fresh cache (one per dialogue, as a call has), ``fmt`` builds its prompts, ``calls``
    whether it may call tools, ``nll`` its validation NLL per agent token."""
    hypotheses: list[str] = []
    references: list[str] = []
    stats_list: list[ReplyStats] = []
    samples: list[dict[str, str]] = []
    tally = ToolUseTally()
    catalogue = packaged_catalogue()
    lane: dict[str, list[bool]] = {}

    def prompt(history: Sequence[Turn]) -> list[int]:
        return fmt.prompt(history, options.history_turns, options.max_context_tokens)

    _generate(new_decoder(), prompt(dialogues[0].turns[:1]), calls, ReplyFacts())  # warm-up
    for dialogue in dialogues:
        decoder = new_decoder()
        for index, turn in enumerate(dialogue.turns):
            if turn.speaker != "agent" or (turn.tool_calls and not calls):
                continue
            history = dialogue.turns[:index]
            facts = fmt.reply_facts(history)
            stats = _generate(decoder, prompt(history), calls, facts)
            stats_list.append(stats)
            if turn.tool_calls:
                grounded = [
                    grounded_call(call, history, dialogue.services, catalogue)
                    for call in stats.tool_calls[:1]
                ]
                tally.add_call_turn(stats.tool_calls, turn.tool_calls[0], *grounded)
            else:
                tally.add_spoken_turn(
                    stats.text,
                    stats.tool_calls,
                    history,
                    lexicon,
                    stats.unfilled_slots,
                    stats.said_back,
                )
                if (kind := lane_kind(turn.text)) is not None:
                    lane.setdefault(kind, []).append(behaves(stats.text, kind))
                hypotheses.append(stats.text)
                references.append(turn.text)
            if len(samples) < 12 and not turn.tool_calls:
                user = dialogue.turns[index - 1].text if index else ""
                samples.append({"user": user, "reference": turn.text, "generated": stats.text})
            if on_reply is not None:
                on_reply()
    first = [s.first_piece_ms - s.start_ms for s in stats_list if s.first_piece_ms is not None]
    whole = [s.end_ms - s.start_ms for s in stats_list]
    tokens = [len(s.token_ids) for s in stats_list]
    steps = [sum(s.steps_per_block) for s in stats_list]
    is_diffusion = diffusion
    blocks = [n for s in stats_list for n in s.steps_per_block]
    nll_per_token = nll()
    return BackendReport(
        backend=backend,
        checkpoint=checkpoint,
        replies=len(stats_list),
        nll_per_token=nll_per_token,
        perplexity=math.exp(nll_per_token),
        bleu=sacrebleu.corpus_bleu(hypotheses, [references]).score,
        first_piece_ms_p50=_percentile(first, 50),
        first_piece_ms_p95=_percentile(first, 95),
        reply_ms_p50=_percentile(whole, 50),
        reply_ms_p95=_percentile(whole, 95),
        ms_per_token_p50=_percentile(
            [w / max(t, 1) for w, t in zip(whole, tokens, strict=True)], 50
        ),
        tokens_per_s=1000.0 * sum(tokens) / max(sum(whole), 1e-9),
        reply_tokens_mean=statistics.fmean(tokens),
        steps_per_block_mean=statistics.fmean(blocks) if is_diffusion and blocks else None,
        tokens_per_step_mean=sum(tokens) / max(sum(steps), 1),
        ms_per_step_p50=_percentile([w / max(n, 1) for w, n in zip(whole, steps, strict=True)], 50),
        samples=samples,
        tools=tally.summary(),
        call_misses=tally.misses,
        hallucinations=tally.hallucinations,
        lane={kind: round(sum(right) / len(right), 4) for kind, right in sorted(lane.items())},
    )


def _decoder(
    loaded: LoadedModel, options: GeneratorOptions, clock: MonotonicClock
) -> BlockDiffusionDecoder | AutoregressiveDecoder:
    kind = (
        AutoregressiveDecoder
        if loaded.model.config.attention == "causal"
        else BlockDiffusionDecoder
    )
    return kind(loaded.model, loaded.format, options.decoding, clock)


class _Decoder(Protocol):
    def decode(
        self,
        prompt: list[int],
        stats: ReplyStats | None = None,
        *,
        calls: bool = False,
        facts: ReplyFacts | None = None,
    ) -> Iterator[ReplyPiece]: ...


def _generate(
    decoder: _Decoder,
    prompt: list[int],
    calls: bool,
    facts: ReplyFacts,
) -> ReplyStats:
    stats = ReplyStats()
    for _ in decoder.decode(prompt, stats, calls=calls, facts=facts):
        pass
    return stats


def _percentile(values: Sequence[float], percent: int) -> float:
    """``core.stats.percentile``, NaN without values (a backend that gave no first piece)."""
    return percentile(values, percent) if values else float("nan")
