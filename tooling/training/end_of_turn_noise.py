"""The augmentation's random changes to a training utterance, so that the model sees what
Whisper writes rather than what the corpora's writers typed.

Numbers written digit by digit ("5 5"), fillers inside an utterance ("um", "you know") and at
its start ("so", "well"), a trailing filler or conjunction ("and um", "so") that turns a
complete utterance into an incomplete one, a few per cent of words dropped or replaced by a
word drawn from the corpus, and the agent's context sometimes withheld. Punctuation and casing
need no augmentation: the features never see them. Every change is drawn from one seeded
generator, so that the same seed gives the same examples.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from cadence.tooling.training.end_of_turn_options import Augmentation

INTERIOR_FILLERS = ("um", "uh", "er", "like", "you know", "i mean", "so", "well", "uh huh")
LEADING_FILLERS = ("um", "uh", "so", "well", "okay so", "um so", "yeah so", "oh")
TRAILING_FILLERS = (
    "um", "uh", "so", "and", "and um", "so um", "but", "or", "like", "you know", "and uh",
    "i mean", "because", "and then", "uh so", "with",
)  # fmt: skip
"""What a caller says before a pause that is not the end of the turn."""

_DIGIT_RUN = re.compile(r"\b\d{2,5}\b")


class Noise:
    """The augmentation's random changes, from one seeded generator."""

    def __init__(self, aug: Augmentation, rng: random.Random, vocabulary: Sequence[str]) -> None:
        self.aug = aug
        self.rng = rng
        self.vocabulary = vocabulary

    def text(self, text: str) -> str:
        if self.rng.random() < self.aug.digit_split:
            return _DIGIT_RUN.sub(lambda m: " ".join(m.group()), text)
        return text

    def words(self, words: Sequence[str], *, at_start: bool = True) -> list[str]:
        rng, aug = self.rng, self.aug
        out: list[str] = []
        for word in words:
            if aug.word_drop and rng.random() < aug.word_drop:
                continue
            if self.vocabulary and aug.word_substitute and rng.random() < aug.word_substitute:
                word = rng.choice(self.vocabulary)
            out.append(word)
        if not out:
            out = list(words)
        if len(out) > 1 and rng.random() < aug.interior_filler:
            at = rng.randrange(1, len(out))
            out[at:at] = rng.choice(INTERIOR_FILLERS).split()
        if at_start and rng.random() < aug.leading_filler:
            out[:0] = rng.choice(LEADING_FILLERS).split()
        return out

    def trailing(self) -> list[str]:
        return self.rng.choice(TRAILING_FILLERS).split()

    def context(self, agent: str | None) -> str | None:
        return None if self.rng.random() < self.aug.no_context else agent
