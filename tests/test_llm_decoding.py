"""Block-wise decoding: the commit and deadline rules, the cache, early emission."""

from __future__ import annotations

import itertools
from collections.abc import Collection
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import llm_tiny
import pytest
import torch
from prerequisites import requires

from cadence.core.clock import VirtualClock
from cadence.kernels import commit_reference
from cadence.llm.attention_masks import visibility
from cadence.llm.autoregressive import AutoregressiveDecoder
from cadence.llm.block_diffusion import BlockDiffusionDecoder
from cadence.llm.checkpoint import EMBEDDED_DIR, LoadedModel, load_model
from cadence.llm.commit_rule import deadline_threshold
from cadence.llm.decoding import DecodingOptions, ReplyStats, never_in_reply
from cadence.llm.dialogue import Turn
from cadence.llm.dialogue_format import DialogueFormat
from cadence.llm.model import Transformer
from cadence.llm.options import LLMOptions
from cadence.llm.reply_loops import committed_prefix

END = 2
HISTORY = [
    Turn("user", "I would like to book a table for two in San Jose."),
    Turn("agent", "Sure, what time would you like the table?"),
    Turn("user", "At seven in the evening, please."),
]


def select_commits(
    confidence: torch.Tensor,
    prediction: torch.Tensor,
    masked: torch.Tensor,
    threshold: float,
    end_ids: Collection[int],
) -> torch.Tensor:
    """The commit rule of :mod:`cadence.kernels.commit_reference` with the end ids as a
    collection."""
    ends = torch.tensor(list(end_ids), dtype=prediction.dtype, device=prediction.device)
    return commit_reference.select_commits(confidence, prediction, masked, threshold, ends)


def _prompt(history: list[Turn] = HISTORY) -> list[int]:
    return llm_tiny.dialogue_format().prompt(history, history_turns=3, max_context_tokens=64)


def _diffusion(options: DecodingOptions, clock: Any = None) -> BlockDiffusionDecoder:
    return BlockDiffusionDecoder(
        llm_tiny.model("block_causal"), llm_tiny.dialogue_format(), options, clock or VirtualClock()
    )


def _run(decoder: BlockDiffusionDecoder | AutoregressiveDecoder, prompt: list[int]) -> ReplyStats:
    stats = ReplyStats()
    pieces = list(decoder.decode(prompt, stats))
    assert "".join(p.text for p in pieces) == stats.text
    return stats


# --- the commit rule ---------------------------------------------------------------------


def test_every_masked_position_at_or_above_the_threshold_commits() -> None:
    confidence = torch.tensor([0.95, 0.5, 0.9, 0.3])
    commit = select_commits(
        confidence, torch.tensor([7, 8, 9, 10]), torch.ones(4, dtype=torch.bool), 0.9, {END}
    )
    assert commit.tolist() == [True, False, True, False]


def test_at_least_the_most_confident_position_commits() -> None:
    confidence = torch.tensor([0.2, 0.5, 0.4, 0.3])
    commit = select_commits(
        confidence, torch.tensor([7, 8, 9, 10]), torch.ones(4, dtype=torch.bool), 0.9, {END}
    )
    assert commit.tolist() == [False, True, False, False]


def test_committed_positions_are_not_committed_again() -> None:
    masked = torch.tensor([False, True, True, False])
    commit = select_commits(
        torch.tensor([0.99, 0.2, 0.3, 0.99]), torch.arange(4) + 7, masked, 0.9, {END}
    )
    assert commit.tolist() == [False, False, True, False]


def test_end_of_turn_waits_until_everything_left_of_it_is_committed() -> None:
    prediction = torch.tensor([7, 8, END, END])
    confidence = torch.tensor([0.3, 0.4, 0.99, 0.98])
    masked = torch.ones(4, dtype=torch.bool)
    assert select_commits(confidence, prediction, masked, 0.9, {END}).tolist() == [
        False,
        True,
        False,
        False,
    ]
    masked = torch.tensor([False, False, True, True])
    assert select_commits(confidence, prediction, masked, 0.9, {END}).tolist() == [
        False,
        False,
        True,
        False,
    ]


def test_the_reply_ends_at_an_end_of_turn_with_nothing_masked_before_it() -> None:
    assert committed_prefix([5, 6, END, 9], [False, False, False, True], (END,)) == ([5, 6], True)
    assert committed_prefix([5, 6, END, 9], [False, True, False, True], (END,)) == ([5], False)


# --- the deadline rule -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("elapsed", "expected"),
    [(0.0, 0.8), (150.0, 0.8), (225.0, 0.6), (300.0, 0.4), (900.0, 0.4), (1e9, 0.4)],
)
def test_a_late_block_lowers_the_threshold_to_half_and_no_lower(
    elapsed: float, expected: float
) -> None:
    # However late, a step never commits positions the model is less than τ/2 sure of (but
    # its one most confident, as on time): a late block is not a block of guesses.
    assert deadline_threshold(0.8, elapsed, 150.0) == pytest.approx(expected)


class _SteppingClock:
    """Moves ``step_ms`` forward every time it is read: each denoising step looks slow."""

    def __init__(self, step_ms: float) -> None:
        self._now = 0.0
        self._step = step_ms

    def now_ms(self) -> float:
        self._now += self._step
        return self._now

    async def sleep_until(self, deadline_ms: float) -> None:
        raise NotImplementedError


def test_running_late_commits_more_per_step_but_never_a_block_of_guesses() -> None:
    options = DecodingOptions(confidence_threshold=0.95, max_reply_tokens=16)
    shipped, slow = _shipped(), _SteppingClock(step_ms=400.0)
    prompt = shipped.format.prompt(HISTORY, history_turns=3, max_context_tokens=128)
    on_time = _run(
        BlockDiffusionDecoder(shipped.model, shipped.format, options, VirtualClock()), prompt
    )
    late = _run(BlockDiffusionDecoder(shipped.model, shipped.format, options, slow), prompt)
    # The trained model is fairly sure of much of a block: late, it commits those at once.
    assert sum(late.steps_per_block) < sum(on_time.steps_per_block)
    # The random model is sure of nothing: however late, one position a step (the old rule,
    # τ falling to 0, committed each of its blocks in one step).
    tiny_on_time = _run(_diffusion(options), _prompt())
    tiny_late = _run(_diffusion(options, _SteppingClock(step_ms=400.0)), _prompt())
    assert tiny_late.steps_per_block == tiny_on_time.steps_per_block
    assert sum(tiny_late.steps_per_block) == len(tiny_late.token_ids)


# --- decoding ----------------------------------------------------------------------------


@dataclass
class _Reference:
    """What :func:`_reference_diffusion` decoded, and how."""

    token_ids: list[int] = field(default_factory=list)
    steps_per_block: list[int] = field(default_factory=list)
    commits_per_step: list[int] = field(default_factory=list)
    closest_to_threshold: float = 1.0
    """The smallest |confidence − τ| of a position that could commit: how far the decisions
    are from a rounding difference between the two ways of computing the logits."""


def _reference_commits(
    confidence: list[float], prediction: list[int], masked: list[bool], tau: float, ends: set[int]
) -> list[int]:
    """The documented commit rule, position by position: every masked position at least τ
    confident commits, and at least the most confident one (the first of equals); an end of
    turn or padding only once nothing left of it is masked."""
    eligible = [
        i
        for i in range(len(masked))
        if masked[i] and confidence[i] > 0 and not (prediction[i] in ends and any(masked[:i]))
    ]
    sure = [i for i in eligible if confidence[i] >= tau]
    if sure or not eligible:
        return sure
    return [max(eligible, key=lambda i: (confidence[i], -i))]


def _reference_diffusion(
    model: Transformer, fmt: DialogueFormat, prompt: list[int], tau: float, max_tokens: int
) -> _Reference:
    """Block diffusion as documented, with nothing of the decoder: no KV cache, no emitter —
    at every step the whole conversation so far (the context, the reply's finished blocks,
    the current block with its masks) goes through the model under the block-causal mask, and
    the step commits by :func:`_reference_commits`. The reply ends at an end of turn or
    padding with nothing masked before it, or at ``max_tokens``."""
    special = fmt.tokenizer.special
    ends = {special.end_of_turn, special.pad}
    banned = torch.tensor([special.mask, special.user, special.agent])
    size = model.config.block_size
    sequence = prompt[:-1]  # the reply's first block starts with <agent>, at a block boundary
    assert sequence, "the reference needs a context before the reply"
    assert len(sequence) % size == 0
    reply_start = len(sequence) + 1
    result = _Reference()
    finished = False
    while not finished and len(sequence) - reply_start < max_tokens:
        block, masked = [special.mask] * size, [True] * size
        if len(sequence) < reply_start:
            block[0], masked[0] = special.agent, False
        steps = 0
        while any(masked) and not finished:
            tokens = sequence + block
            positions = torch.arange(len(tokens))
            allowed = visibility(positions, positions, "block_causal", size)
            with torch.inference_mode():
                logits = model(torch.tensor([tokens]), positions[None], allowed[None, None])[0]
            # Output j - 1 predicts position j: the block's first from the row before it.
            rows = logits[len(sequence) - 1 : -1].index_fill(-1, banned, float("-inf"))
            confidence, prediction = rows.softmax(-1).max(-1)
            commits = _reference_commits(
                confidence.tolist(), prediction.tolist(), masked, tau, ends
            )
            for i in range(size):
                if masked[i] and not (int(prediction[i]) in ends and any(masked[:i])):
                    gap = abs(float(confidence[i]) - tau)
                    result.closest_to_threshold = min(result.closest_to_threshold, gap)
            for i in commits:
                block[i], masked[i] = int(prediction[i]), False
            steps += 1
            result.commits_per_step.append(len(commits))
            # The reply so far: its committed tokens up to the first masked one or an end.
            said: list[int] = []
            for token, is_masked in zip(
                (sequence + block)[reply_start:],
                ([False] * len(sequence) + masked)[reply_start:],
                strict=True,
            ):
                if is_masked or token in ends:
                    finished = not is_masked
                    break
                said.append(token)
            result.token_ids = said[:max_tokens]
            finished = finished or len(said) >= max_tokens
        result.steps_per_block.append(steps)
        sequence += block
    return result


def test_cached_diffusion_decoding_equals_the_reference_one_commit_per_step() -> None:
    """τ = 1 on the tiny model: one commit per step, the most confident position."""
    options = DecodingOptions(confidence_threshold=1.0, max_reply_tokens=11)
    decoder = _diffusion(options)
    stats = _run(decoder, _prompt())
    reference = _reference_diffusion(decoder.model, decoder.format, _prompt(), 1.0, 11)
    assert stats.token_ids == reference.token_ids
    assert stats.steps_per_block == reference.steps_per_block
    assert set(reference.commits_per_step) == {1}
    assert len(stats.token_ids) == 11  # a random model never ends: the cap stops it


@cache
def _shipped() -> LoadedModel:
    return load_model("embedded:dllm")


@requires(
    (EMBEDDED_DIR / "dllm.pt").exists(), "needs the shipped checkpoint llm/checkpoints/dllm.pt"
)
@pytest.mark.parametrize(
    "history",
    [HISTORY, [Turn("user", "What is the weather going to be like in Boston this weekend?")]],
    ids=["three turns", "one turn"],
)
def test_cached_decoding_at_the_default_threshold_equals_a_from_scratch_reference(
    history: list[Turn],
) -> None:
    """At the default τ several positions commit in one step; the cached decoder (its KV
    cache, early emission, the kernel dispatcher) must commit exactly what the reference
    commits, token for token and step for step. The shipped checkpoint: the tiny random
    model is never confident enough to commit two positions at once."""
    defaults = LLMOptions()
    tau = defaults.confidence_threshold
    shipped = _shipped()
    fmt = shipped.format
    prompt = fmt.prompt(history, defaults.history_turns, defaults.max_context_tokens)
    options = DecodingOptions(confidence_threshold=tau, max_reply_tokens=defaults.max_reply_tokens)
    # A clock that never moves: no block runs late, so τ is never lowered.
    decoder = BlockDiffusionDecoder(shipped.model, fmt, options, VirtualClock())
    stats = _run(decoder, prompt)
    reference = _reference_diffusion(shipped.model, fmt, prompt, tau, options.max_reply_tokens)
    assert stats.token_ids == reference.token_ids, (
        f"closest confidence to τ: {reference.closest_to_threshold:.2e}"
    )
    assert stats.steps_per_block == reference.steps_per_block
    assert stats.text == fmt.tokenizer.decode(reference.token_ids)
    # The case under test happened: steps that committed several positions at once.
    assert max(reference.commits_per_step) > 1, reference.commits_per_step
    assert len(reference.steps_per_block) > 1  # and more than one block: the cache was used


def test_cached_autoregressive_decoding_equals_uncached_decoding() -> None:
    model, fmt = llm_tiny.model("causal"), llm_tiny.dialogue_format()
    decoder = AutoregressiveDecoder(model, fmt, DecodingOptions(max_reply_tokens=9), VirtualClock())
    stats = _run(decoder, _prompt())
    sequence = _prompt()
    never = never_in_reply(llm_tiny.tokenizer().special)
    for _ in range(9):
        causal = visibility(torch.arange(len(sequence)), torch.arange(len(sequence)), "causal", 4)
        logits = model(
            torch.tensor([sequence]), torch.arange(len(sequence))[None], causal[None, None]
        )
        sequence.append(int(logits[0, -1].index_fill(0, never, float("-inf")).argmax()))
    assert stats.token_ids == sequence[len(_prompt()) :]


def test_committed_tokens_never_change(monkeypatch: pytest.MonkeyPatch) -> None:
    decoder = _diffusion(DecodingOptions(confidence_threshold=0.9, max_reply_tokens=15))
    inputs: list[list[int]] = []
    forward = decoder._forward

    def recording(pending: list[int], block: list[int], keep: int) -> torch.Tensor:
        inputs.append(list(block))
        return forward(pending, block, keep)

    monkeypatch.setattr(decoder, "_forward", recording)
    _run(decoder, _prompt())
    mask = llm_tiny.tokenizer().special.mask
    for before, after in itertools.pairwise(inputs):
        if before.count(mask) == 0 or after.count(mask) == len(after):
            continue  # a new block started
        for old, new in zip(before, after, strict=True):
            assert old in (mask, new)
    assert len(inputs) > 4


def test_pieces_end_at_word_boundaries_and_join_to_the_reply() -> None:
    decoder = _diffusion(DecodingOptions(confidence_threshold=0.9, max_reply_tokens=24))
    stats = ReplyStats()
    pieces = list(decoder.decode(_prompt(), stats))
    assert "".join(p.text for p in pieces) == stats.text
    assert stats.text == llm_tiny.tokenizer().decode(stats.token_ids)
    for piece in pieces[1:]:
        assert piece.text.startswith(" ") or not piece.text.strip()
    assert [p.at_ms for p in pieces] == sorted(p.at_ms for p in pieces)


def test_a_new_turn_prefills_only_what_is_new() -> None:
    options = DecodingOptions(confidence_threshold=0.9, max_reply_tokens=7)
    decoder = _diffusion(options)
    first = _run(decoder, _prompt(HISTORY[:1]))
    assert first.prefilled_tokens == len(_prompt(HISTORY[:1])) - 1
    second = _run(decoder, _prompt())
    new_turns = llm_tiny.dialogue_format().encode_turn(HISTORY[1]) + (
        llm_tiny.dialogue_format().encode_turn(HISTORY[2])
    )
    assert second.prefilled_tokens <= len(new_turns)
    assert second.token_ids == _run(_diffusion(options), _prompt()).token_ids


def test_prefill_ahead_of_the_turn_leaves_only_the_user_turn() -> None:
    decoder = _diffusion(DecodingOptions(max_reply_tokens=5))
    decoder.prefill(_prompt(HISTORY[:2])[:-1])
    stats = _run(decoder, _prompt())
    assert stats.prefilled_tokens == len(llm_tiny.dialogue_format().encode_turn(HISTORY[2]))


# --- awkward inputs ----------------------------------------------------------------------


def test_empty_history_still_gets_a_reply() -> None:
    stats = _run(_diffusion(DecodingOptions(max_reply_tokens=5)), _prompt([]))
    assert len(stats.token_ids) == 5


def test_over_long_history_is_truncated_from_the_oldest_turn() -> None:
    fmt = llm_tiny.dialogue_format()
    long_history = [Turn("user", f"turn number {i} " * 30) for i in range(10)]
    turn_tokens = fmt.max_turn_tokens  # every turn here is cut to this
    prompt = fmt.prompt(long_history, history_turns=3, max_context_tokens=2 * turn_tokens + 1)
    assert prompt[:-1] == fmt.encode_turn(long_history[-2]) + fmt.encode_turn(long_history[-1])
    _run(_diffusion(DecodingOptions(max_reply_tokens=5)), prompt)


def test_unusual_characters_survive_the_round_trip() -> None:
    history = [Turn("user", "Café → 東京? 🎉🎉 naïve\ttabs\nnewline \u200b zero-width")]
    tokenizer = llm_tiny.tokenizer()
    for turn in history:  # what the model is given is what the caller said
        assert tokenizer.decode(tokenizer.encode(turn.text)) == turn.text
    stats = _run(_diffusion(DecodingOptions(max_reply_tokens=6)), _prompt(history))
    assert len(stats.token_ids) == 6  # a random model never ends: the cap stops it
    assert stats.text == tokenizer.decode(stats.token_ids)
