"""What the GPU bench (:mod:`cadence.tooling.bench.gpu`) measures: the commit and block-attention
kernels at the project's shapes, one denoising step eager and graphed, and whole replies of an
open-weight model through the turn generator. Each function returns plain dictionaries, the
rows of the report.

Times are wall milliseconds of calls synchronised with the device (the decoder reads what
committed after every step, so a step's time is until its result is on the host): medians
and 90th percentiles, never means.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from cadence import kernels
from cadence.core.clock import MonotonicClock, VirtualClock
from cadence.core.stats import median, percentile
from cadence.kernels.commit_reference import commit_reference
from cadence.kernels.dispatch import Backend, commit_choices
from cadence.llm.decoding import DecodingOptions, ReplyStats
from cadence.llm.dialogue import Turn
from cadence.llm.generator import DecoderTurnGenerator, GeneratorOptions
from cadence.llm.open_weights import OpenWeightsDecoder, OpenWeightsModel
from cadence.llm.open_weights.decoder import never_predicted
from cadence.llm.open_weights.graphed import GraphedOpenWeightsDecoder
from cadence.tooling.bench import tiny_open_weights as tiny
from cadence.tooling.bench.full_size import MODELS, VOCAB
from cadence.tooling.bench.kernels import timed

Row = dict[str, Any]
THRESHOLD = 0.9
"""τ of every reply (a random model is never this sure: one commit per step, the worst case)."""
HISTORY_TURNS = 6


def summary(times: list[float]) -> dict[str, float | int]:
    """Median, 90th percentile and count of ``times`` (milliseconds)."""
    return {
        "p50_ms": round(median(times), 3),
        "p90_ms": round(percentile(times, 90), 3),
        "runs": len(times),
    }


def backends(device: torch.device) -> list[Backend]:
    """The implementations that run on ``device``: the reference, and Triton on CUDA."""
    return ["reference", "triton"] if device.type == "cuda" else ["reference"]


def banned_sets(name: str) -> dict[str, torch.Tensor]:
    """A family's banned mask as its decoder builds it, for the published tokenizer (every
    id up to the mask: a few hundred banned) and for the bench's tiny one (151,6xx banned)."""
    family = MODELS[name].family
    vocab = json.loads(tiny.tokenizer_json(family))["model"]["vocab"]
    return {
        "published tokenizer": never_predicted(VOCAB, range(family.mask_id + 1), family.mask_id),
        "bench tokenizer": never_predicted(VOCAB, sorted(vocab.values()), family.mask_id),
    }


def commit_rows(device: torch.device, repeats: int) -> list[Row]:
    """The commit step at each shape the project runs, per implementation, with whether
    Triton's decision equals the reference's."""
    generator = torch.Generator().manual_seed(0)
    ends = torch.tensor([151645, 151643], device=device)
    cases: list[tuple[str, int, int, torch.dtype, torch.Tensor, str]] = [
        ("embedded model", 8, 4096, torch.float32, torch.tensor([1, 3, 4]), "3 ids"),
    ]
    for name, model in MODELS.items():
        for tokenizer, mask in banned_sets(name).items():
            count = f"{int(mask.sum())} ({tokenizer})"
            dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
            cases.append((name, model.block_size, VOCAB, dtype, mask, count))
            if model.family.sub_block:  # the eager decoder decides over a sub-block
                cases.append(
                    (f"{name} sub-block", model.family.sub_block, VOCAB, dtype, mask, count)
                )
    rows = []
    for label, block, vocab, dtype, banned_cpu, banned_label in cases:
        logits = (torch.randn(1, block, vocab, generator=generator) * 4).to(device, dtype)
        masked = torch.ones(1, block, dtype=torch.bool, device=device)
        banned = banned_cpu.to(device)
        tau = torch.tensor([0.7], device=device)
        run = partial(kernels.commit_decision, logits, masked, tau, banned, ends)
        row: Row = {"model": label, "shape": f"1×{block}×{vocab}", "dtype": str(dtype)}
        row["banned"] = banned_label
        for name in backends(device):
            with kernels.use_backend(name):
                row[name] = summary(timed(run, device, repeats))
        if device.type == "cuda":
            row["dispatched"] = summary(timed(run, device, repeats))  # the measured rule
            with kernels.use_backend("triton"):
                got = run()
            expected = commit_reference(logits, masked, tau, banned, ends)
            row["same_commits"] = bool(torch.equal(got.commit, expected.commit))
            row["same_predictions"] = bool(torch.equal(got.prediction, expected.prediction))
            row["confidence_max_diff"] = float((got.confidence - expected.confidence).abs().max())
            row["triton_not_slower"] = row["triton"]["p50_ms"] <= row["reference"]["p50_ms"]
        rows.append(row)
    return rows


def attention_rows(device: torch.device, repeats: int) -> list[Row]:
    """Block attention at the families' full-size shapes (query heads over the fewer
    key/value heads, as the network passes them), on a short and a long cache."""
    generator = torch.Generator().manual_seed(1)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    rows = []
    for name, model in MODELS.items():
        heads, dim = model.shape["num_attention_heads"], model.shape["head_dim"]
        kv_heads, block = model.shape["num_key_value_heads"], model.block_size
        for valid, slots in ((200, 256), (1000, 1024)):
            q = torch.randn(1, heads, block, dim, generator=generator).to(device, dtype)
            k, v = (
                torch.randn(1, kv_heads, slots + block, dim, generator=generator).to(device, dtype)
                for _ in "kv"
            )
            lengths = torch.tensor([valid], device=device)
            run = partial(kernels.block_attention, q, k, v, lengths)
            shape = f"{heads}/{kv_heads} heads × {dim}, {valid}/{slots} + {block}"
            row: Row = {"model": name, "shape": shape}
            for backend in backends(device):
                with kernels.use_backend(backend):
                    row[backend] = summary(timed(run, device, repeats))
            rows.append(row)
    return rows


def _context(model: OpenWeightsModel, turns: int) -> list[int]:
    history = [Turn("user" if i % 2 == 0 else "agent", tiny.TEXTS[i]) for i in range(turns)]
    return model.chat.prompt(history, HISTORY_TURNS, 1024)[:-1]


def step_rows(model: OpenWeightsModel, device: torch.device, repeats: int) -> list[Row]:
    """A reply's first denoising step on a prefilled 5-turn context: the eager decoder with
    the reference kernels (the issue's baseline), eager with the dispatched kernels, and the
    fixed-shape step (a CUDA graph replay on CUDA)."""
    options = DecodingOptions(confidence_threshold=THRESHOLD)
    context = _context(model, 5)
    eager = OpenWeightsDecoder(model, options, MonotonicClock())
    graphed = GraphedOpenWeightsDecoder(model, options, MonotonicClock())
    eager.prefill(context)
    graphed.prefill(context)
    size = model.block_size
    window = slice(0, model.family.sub_block or size)

    def eager_step() -> list[bool]:
        masked = torch.ones(size, dtype=torch.bool, device=device)
        decision, _ = eager.decide(
            [], [model.family.mask_id] * size, masked, window, None, lambda: THRESHOLD
        )
        committed: list[bool] = decision.commit.tolist()
        return committed

    rows: list[Row] = []
    shape = f"{size} over {len(graphed.cache.ids)}"
    with torch.inference_mode():
        with kernels.use_backend("reference"):
            rows.append(
                {
                    "step": "eager, reference kernels",
                    "shape": shape,
                    **summary(timed(eager_step, device, repeats)),
                }
            )
        if device.type == "cuda":
            rows.append(
                {"step": "eager", "shape": shape, **summary(timed(eager_step, device, repeats))}
            )
        label = "graphed (CUDA graph)" if device.type == "cuda" else "fixed-shape (eager)"
        run = partial(graphed.timed_step, THRESHOLD)
        rows.append({"step": label, "shape": shape, **summary(timed(run, device, repeats))})
    return rows


def _forwards(decoder: OpenWeightsDecoder) -> int:
    """Forwards the graphed decoder has run (the eager one does not count them: 0)."""
    return getattr(decoder, "forwards", 0)


async def _turns(
    generator: DecoderTurnGenerator, decoder: OpenWeightsDecoder, turns: int, prefill: bool
) -> Row:
    """Ten-turn conversation (after a warm-up turn): per turn, the time from asking for the
    reply to its first piece and to its end, through the generator as the turn engine calls
    it; with ``prefill``, the history is prefilled first, as while the caller speaks. Also
    the forwards (denoising steps and carries of the new prompt's and the finished blocks)
    before the first piece and in the reply: a reply's time per forward is what compares with
    the isolated step; its time per step counts the carries too."""
    history: list[Turn] = []
    first, whole, tokens, steps, before_first, forwards = [], [], [], [], [], []
    for turn in range(turns + 1):
        if prefill:
            await generator.prefill(history)
        history.append(Turn("user", tiny.TEXTS[turn % len(tiny.TEXTS)]))
        counted = _forwards(decoder)
        started = time.perf_counter()
        stream = generator.stream(history)
        await anext(stream)
        first_ms = 1000 * (time.perf_counter() - started)
        first_forwards = _forwards(decoder) - counted
        async for _piece in stream:
            pass
        stats = generator.last_stats
        if turn:
            first.append(first_ms)
            whole.append(1000 * (time.perf_counter() - started))
            tokens.append(len(stats.token_ids))
            steps.append(sum(stats.steps_per_block))
            before_first.append(first_forwards)
            forwards.append(_forwards(decoder) - counted)
        history.append(Turn("agent", stats.text))
    row: Row = {
        "first_piece": summary(first),
        "whole_reply": summary(whole),
        "reply_tokens": median(tokens),
        "steps_per_reply": median(steps),
        "ms_per_step": round(median(w / s for w, s in zip(whole, steps, strict=True)), 3),
    }
    if any(forwards):
        row["forwards_to_first_piece"] = summary([float(n) for n in before_first])
        row["forwards_per_reply"] = median(forwards)
        row["ms_per_forward"] = round(
            median(w / n for w, n in zip(whole, forwards, strict=True)), 3
        )
    return row


@dataclass(frozen=True)
class ReplyVariant:
    decoder: str
    prefill: bool
    make: Callable[[], OpenWeightsDecoder]
    options: GeneratorOptions


def reply_variants(model: OpenWeightsModel, reply_tokens: int) -> list[ReplyVariant]:
    """The graphed decoder without and with prefill, and the eager decoder without."""
    options = GeneratorOptions(
        DecodingOptions(confidence_threshold=THRESHOLD, max_reply_tokens=reply_tokens),
        history_turns=HISTORY_TURNS,
        max_context_tokens=1024,
    )
    graphed = partial(GraphedOpenWeightsDecoder, model, options.decoding, MonotonicClock())
    eager = partial(OpenWeightsDecoder, model, options.decoding, MonotonicClock())
    return [
        ReplyVariant("graphed", False, graphed, options),
        ReplyVariant("graphed", True, graphed, options),
        ReplyVariant("eager", False, eager, options),
    ]


def reply_row(model: OpenWeightsModel, variant: ReplyVariant, turns: int) -> Row:
    """A whole conversation through :class:`DecoderTurnGenerator` with ``variant``'s decoder."""
    started = time.perf_counter()
    decoder = variant.make()  # a call's set-up: the graphed decoder captures its buckets here
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    setup_ms = round(1000 * (time.perf_counter() - started), 1)
    generator = DecoderTurnGenerator(decoder, model.chat, variant.options)
    measured = asyncio.run(_turns(generator, decoder, turns, variant.prefill))
    row: Row = {"decoder": variant.decoder, "prefill": variant.prefill, **measured}
    row["setup_ms"] = setup_ms
    if isinstance(decoder, GraphedOpenWeightsDecoder):
        row["carry_blocks"] = decoder.carry_blocks
    return row


def agreement_row(model: OpenWeightsModel, device: torch.device, reply_tokens: int) -> Row:
    """Do the graphs decode what the same steps decode without them? Two turns on a clock
    that stands still (τ never moves), by the captured decoder, the same fixed-shape steps
    run eagerly (they must agree token for token: the graph replays the same kernels), and
    the eager decoder (reported, not required: its dense attention rounds bfloat16
    differently from the block-attention kernel)."""
    options = DecodingOptions(confidence_threshold=THRESHOLD, max_reply_tokens=reply_tokens)
    captured = GraphedOpenWeightsDecoder(model, options, VirtualClock())
    # The same carry limit (measured by the captured one on CUDA): a prompt carried by
    # replays or by one eager forward rounds bfloat16 differently.
    limit = captured.carry_blocks
    decoders = {
        "captured": captured,
        "uncaptured": GraphedOpenWeightsDecoder(model, options, VirtualClock(), False, limit),
        "eager": OpenWeightsDecoder(model, options, VirtualClock()),
    }
    replies: dict[str, list[list[int]]] = {name: [] for name in decoders}
    history: list[Turn] = []
    for turn in range(2):
        history.append(Turn("user", tiny.TEXTS[turn]))
        prompt = model.chat.prompt(history, HISTORY_TURNS, 1024)
        for name, decoder in decoders.items():
            stats = ReplyStats()
            list(decoder.decode(prompt, stats))
            replies[name].append(stats.token_ids)
        history.append(Turn("agent", model.chat.tokenizer.decode(replies["eager"][-1])))
    return {
        "device": str(device),
        "captured_equals_uncaptured": replies["captured"] == replies["uncaptured"],
        "captured_equals_eager": replies["captured"] == replies["eager"],
        "tokens": [len(reply) for reply in replies["captured"]],
    }


def chosen_commits() -> list[Row]:
    """The measured rule's choices so far (shape, dtype → implementation)."""
    return [
        {"shape": "×".join(map(str, key[0])), "dtype": str(key[1]), "chosen": choice}  # type: ignore[call-overload]
        for key, choice in commit_choices().items()
    ]
