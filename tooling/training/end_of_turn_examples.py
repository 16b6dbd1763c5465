"""The text end-of-turn model's examples: user turns of the dialogue corpora, whole
(complete, label 1) and cut at word boundaries (incomplete, label 0).

The prefixes are what a speculative transcript looks like when the caller pauses
mid-sentence. Each example carries the agent's turn before it as context. Some prefixes are
complete sentences in their own right ("Yes, thanks." of "Yes, thanks. What's their phone
number?"): a prefix that ends where the writer ended a sentence, or that is word for word a
whole user turn elsewhere in the training corpora, is left out of training (it would teach the
model that finished sentences are unfinished) and is counted apart in the evaluation, which is
how much of the error is label noise is measured.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cadence.tooling.training.corpus import read_dialogues
from cadence.tooling.training.end_of_turn_noise import Noise
from cadence.tooling.training.end_of_turn_options import TurnModelOptions
from cadence.voice.turn.features import words_of

_SENTENCE_END = re.compile(r"[.?!][\"')\]]*$")


@dataclass(frozen=True)
class UserTurn:
    text: str
    agent: str | None
    """The agent's turn right before, if the turn before was the agent's."""


@dataclass(frozen=True)
class Example:
    words: tuple[str, ...]
    agent: str | None
    label: int
    """1: complete, 0: incomplete."""
    kind: str
    """``complete``; or why it is incomplete: ``mid`` (cut mid-sentence), ``sentence_end``
    (cut where the writer ended a sentence), ``whole_turn`` (a prefix that is a whole user turn
    elsewhere), ``trailing_filler`` (a complete turn followed by "and um")."""


def user_turns(path: Path, limit: int | None = None) -> list[UserTurn]:
    """Every user turn of a corpus with the agent turn before it."""
    turns: list[UserTurn] = []
    for dialogue in read_dialogues(path, limit):
        previous: str | None = None
        for turn in dialogue.turns:
            if turn.speaker == "user":
                turns.append(UserTurn(turn.text, previous))
                previous = None
            else:
                previous = turn.text
    return turns


def whole_turns(turns: Iterable[UserTurn], min_count: int = 2) -> frozenset[tuple[str, ...]]:
    """The normalised texts that are whole user turns at least ``min_count`` times (once may be
    a typo): a prefix equal to one is a complete utterance in its own right ("yes", "no
    thanks"), not a truly incomplete one."""
    counts = Counter(tuple(words_of(t.text)) for t in turns)
    return frozenset(text for text, n in counts.items() if n >= min_count and text)


def _cuts(text: str) -> tuple[list[str], list[int], set[int]]:
    """The raw tokens of a turn, the cut points (prefix lengths 1 … n−1) and those of them
    where the writer ended a sentence."""
    tokens = text.split()
    cuts = list(range(1, len(tokens)))
    ends = {k for k in cuts if _SENTENCE_END.search(tokens[k - 1])}
    return tokens, cuts, ends


def training_examples(
    turns: Sequence[UserTurn],
    known: frozenset[tuple[str, ...]],
    options: TurnModelOptions,
    rng: random.Random,
    vocabulary: Sequence[str],
) -> list[Example]:
    """Each turn (complete), 1–3 of its mid-sentence prefixes, and the augmentation's extras."""
    noise = Noise(options.augmentation, rng, vocabulary)
    low, high = options.prefixes_per_turn
    examples: list[Example] = []
    for turn in turns:
        text = noise.text(turn.text)
        agent = noise.context(turn.agent)
        complete = words_of(text)
        if not complete:
            continue
        examples.append(Example(tuple(noise.words(complete)), agent, 1, "complete"))
        if rng.random() < options.augmentation.trailing_filler:
            words = [*noise.words(complete), *noise.trailing()]
            examples.append(Example(tuple(words), agent, 0, "trailing_filler"))
        tokens, cuts, ends = _cuts(text)
        cuts = [k for k in cuts if k not in ends]
        for k in rng.sample(cuts, min(len(cuts), rng.randint(low, high))):
            prefix = words_of(" ".join(tokens[:k]))
            if not prefix or tuple(prefix) in known:
                continue
            words = noise.words(prefix)
            if rng.random() < options.augmentation.prefix_trailing_filler:
                words += noise.trailing()
            examples.append(Example(tuple(words), agent, 0, "mid"))
    return examples


def evaluation_examples(
    turns: Sequence[UserTurn],
    known: frozenset[tuple[str, ...]],
    rng: random.Random,
    noise: Noise | None = None,
) -> list[Example]:
    """Each turn, complete, and one prefix cut at a word boundary drawn uniformly — sentence
    ends included, labelled by kind so that label noise is counted apart. With ``noise``, the
    same with the augmentation applied (and a trailing-filler example per turn at its rate)."""
    examples: list[Example] = []
    for turn in turns:
        text = noise.text(turn.text) if noise else turn.text
        complete = words_of(text)
        if not complete:
            continue
        shown = noise.words(complete) if noise else complete
        examples.append(Example(tuple(shown), turn.agent, 1, "complete"))
        if noise and rng.random() < noise.aug.trailing_filler:
            words = [*noise.words(complete), *noise.trailing()]
            examples.append(Example(tuple(words), turn.agent, 0, "trailing_filler"))
        tokens, cuts, ends = _cuts(text)
        if not cuts:
            continue
        k = rng.choice(cuts)
        prefix = words_of(" ".join(tokens[:k]))
        if not prefix:
            continue
        if k in ends:
            kind = "sentence_end"
        elif tuple(prefix) in known:
            kind = "whole_turn"
        else:
            kind = "mid"
        shown = noise.words(prefix) if noise else prefix
        examples.append(Example(tuple(shown), turn.agent, 0, kind))
    return examples
