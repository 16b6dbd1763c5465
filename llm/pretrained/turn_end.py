"""P(the caller has finished their turn), read off a pretrained language model.

SmolLM2-Instruct was tuned on chats, where a user message ends with ``<|im_end|>``: asked for
the next token after the caller's words, written as a user message, it says how likely the
message is over. The language model is not trained; a logistic regression over a dozen numbers
read off that one pass (:data:`FEATURES`: the end's probability, the sentence ends', a comma's,
how spread the next word is) is fit on the dialogue corpora (:class:`Calibration`).

Two details make it read speech rather than text:

* Whisper ends a transcript with a period as readily in a mid-sentence pause as at the end,
  so the final punctuation is removed, and the model's own expectation of it is summed over:
  P(end) = P(``<|im_end|>``) + Σ P(p) · P(``<|im_end|>`` | p) for p in ``.``, ``?``, ``!`` —
  the three continuations are scored in the same pass as the words (branch positions of
  :meth:`ScoredConversation.log_probs`), so the sum costs no second pass.
* The agent's last words come first, as the assistant message the caller answers: "two" is a
  whole answer to "How many people?" and half of one to nothing.

One :class:`TurnEndSession` per call holds that call's conversation in the model's KV cache
(:class:`~cadence.llm.pretrained.language_model.ScoredConversation`): the context is prefilled
while the caller speaks, and each transcript extends it from the first token that changed, so
the score of the final transcript is usually ready before it is asked for.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from cadence.core.stats import logit
from cadence.llm.pretrained.language_model import LanguageModel, ScoredConversation

SYSTEM_PROMPT = "You are a helpful voice assistant on a phone call."
"""Chosen on sgd_dev among none, SmolLM2's own default and this one (AUC 0.928 / 0.929 /
0.933, complete turns against prefixes cut at a random word)."""
SENTENCE_ENDS = (".", "?", "!")
CALIBRATION_RESOURCE = "turn_end_calibration.json"
ADAPTER_CALIBRATIONS = {"embedded:smollm2-ar": "turn_end_calibration.smollm2-ar.json"}
"""The calibrations fit for a reply adapter's network scoring the end of turn."""

_TRAILING = re.compile(r"[\s.,!?;:…]+$")
_PRONOUN_I = re.compile(r"\bi\b(?=$|[\s'’,.!?])")
_FLOOR = -30.0
"""Log-probabilities below this are this: a feature must be finite."""


FEATURES = (
    "logit_p_end",
    "log_p_im_end",
    "log_p_period",
    "log_p_question",
    "log_p_exclamation",
    "log_p_im_end_after_period",
    "log_p_im_end_after_question",
    "log_p_im_end_after_exclamation",
    "log_p_comma",
    "entropy",
    "log_p_top",
)
"""What the calibration reads of one pass: logit(P(end)) (below), and log-probabilities of the
next token after the words — the end of the message, each sentence end, a comma — and after
each sentence end, the end of the message; the next token's entropy and its top probability.
Measured on sgd_dev (two-fold) and the clips' references: logit(P(end)) alone, AUC 0.938 and
0.947; all of them, 0.952 and 0.955 (docs/end-of-turn.md)."""


@dataclass(frozen=True)
class Calibration:
    """P(complete) = σ(w · (f − mean) / scale + bias) over :data:`FEATURES` ``f``, fit on
    sgd_dev by ``cadence calibrate-turn-lm``; until then, σ(logit(P(end))): P(end) itself."""

    weights: tuple[float, ...] = (1.0,) + (0.0,) * (len(FEATURES) - 1)
    mean: tuple[float, ...] = (0.0,) * len(FEATURES)
    scale: tuple[float, ...] = (1.0,) * len(FEATURES)
    bias: float = 0.0
    threshold: float = 0.5
    """The calibrated P at or above which an utterance counts as complete: chosen on the same
    corpus, to leave the largest margin over the targets (95 % of complete turns, 97 % of
    turns cut mid-sentence)."""
    metadata: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not len(self.weights) == len(self.mean) == len(self.scale) == len(FEATURES):
            raise ValueError(f"a calibration has {len(FEATURES)} weights, means and scales")

    def __call__(self, features: Sequence[float]) -> float:
        z = self.bias + sum(
            w * (f - m) / s
            for w, f, m, s in zip(self.weights, features, self.mean, self.scale, strict=True)
        )
        return 1 / (1 + math.exp(-z)) if z >= 0 else math.exp(z) / (1 + math.exp(z))

    @classmethod
    def shipped(cls, model: str | None = None) -> Calibration:
        """The calibration fit for ``model`` (``models.lm.model``): the reply adapter's own
        for ``embedded:smollm2-ar``, else the base SmolLM2's."""
        name = CALIBRATION_RESOURCE
        if model in ADAPTER_CALIBRATIONS:
            name = ADAPTER_CALIBRATIONS[model]
        resource = resources.files("cadence.llm.pretrained").joinpath(name)
        if not resource.is_file():
            return cls()
        data = json.loads(resource.read_text())
        if tuple(data.get("features", ())) != FEATURES:
            raise ValueError(f"{name} was fit on other features; refit it")
        return cls(
            tuple(float(w) for w in data["weights"]),
            tuple(float(m) for m in data["mean"]),
            tuple(float(v) for v in data["scale"]),
            float(data["bias"]),
            float(data["threshold"]),
            data.get("metadata"),
        )


def spoken_words(text: str) -> str:
    """The transcript as it was spoken: without the punctuation Whisper ended it with, and
    in lower case (the pronoun "I" kept). Whisper capitalizes whatever it hears first, and the
    model reads a capital as the start of something longer: after "How many people?", "Two"
    scored 0.13 and "two" 0.75. Calibrated on the same form (docs/end-of-turn.md)."""
    words = _TRAILING.sub("", text.strip()).lower()
    return _PRONOUN_I.sub("I", words)


class TurnEndModel:
    """The language model and what is needed to score with it; one per process."""

    def __init__(
        self,
        model: LanguageModel,
        calibration: Calibration | None = None,
        system_prompt: str = SYSTEM_PROMPT,
    ) -> None:
        self.model = model
        self.calibration = calibration or Calibration.shipped()
        self._system = model.message("system", system_prompt) if system_prompt else []
        self._ends = [model.encode(mark)[0] for mark in SENTENCE_ENDS]
        self._comma = model.encode(",")[0]

    def context(self, agent_text: str | None) -> list[int]:
        """The conversation up to the caller's first word."""
        agent = self.model.message("assistant", agent_text) if agent_text else []
        return [*self._system, *agent, *self.model.open_message("user")]

    def session(self) -> TurnEndSession:
        return TurnEndSession(self)


class TurnEndSession:
    """One call's scorer. Blocking and not thread-safe: run one call's work at a time."""

    def __init__(self, scorer: TurnEndModel) -> None:
        self._scorer = scorer
        self.conversation: ScoredConversation = scorer.model.new_conversation()
        """The call's conversation in the model's KV cache, for whatever else reads it."""
        self._scores: dict[tuple[str | None, str], float] = {}

    def prefill(self, agent_text: str | None) -> None:
        """Put the context of the caller's next words in the cache."""
        self.conversation.extend(self._scorer.context(agent_text))

    def extend(self, text: str, agent_text: str | None = None) -> None:
        """Put ``text`` after ``agent_text`` in the cache without scoring it (a partial
        transcript: the score that counts is the speculative transcript's)."""
        ids = self._scorer.context(agent_text)
        if words := spoken_words(text):
            ids += self._scorer.model.encode(words)
        self.conversation.extend(ids)

    def features(self, text: str, agent_text: str | None = None) -> list[float]:
        """:data:`FEATURES` of ``text`` after ``agent_text``, from one pass over the words and
        the three sentence ends."""
        words = spoken_words(text)
        if not words:
            return [logit(0.0), *([_FLOOR] * (len(FEATURES) - 1))]
        model, ends = self._scorer.model, self._scorer._ends
        ids = [*self._scorer.context(agent_text), *model.encode(words)]
        log_probs = self.conversation.log_probs(ids, ends).clamp(min=_FLOOR)
        probs = log_probs.exp()
        end = model.chat.im_end
        after = [float(log_probs[i + 1, end]) for i in range(len(ends))]
        p_end = float(probs[0, end]) + sum(
            float(probs[0, mark]) * math.exp(a) for mark, a in zip(ends, after, strict=True)
        )
        row = log_probs[0]
        return [
            logit(p_end),
            float(row[end]),
            *(float(row[mark]) for mark in ends),
            *after,
            float(row[self._scorer._comma]),
            float(-(probs[0] * row).sum()),
            float(row.max()),
        ]

    def p_end(self, text: str, agent_text: str | None = None) -> float:
        """P(``<|im_end|>`` or a sentence end and then ``<|im_end|>``) after ``text``: the
        model's own probability that the message is over (uncalibrated)."""
        z = self.features(text, agent_text)[0]
        return 1 / (1 + math.exp(-z))

    def probability(self, text: str, agent_text: str | None = None) -> float:
        """Calibrated P(the caller's utterance ``text`` is complete), remembered for the
        call's latest context: asking twice computes once."""
        key = (agent_text, text)
        if key not in self._scores:
            if self._scores and next(iter(self._scores))[0] != agent_text:
                self._scores.clear()  # a new turn: the old words will not come back
            self._scores[key] = self._scorer.calibration(self.features(text, agent_text))
        return self._scores[key]

    def known(self, text: str, agent_text: str | None = None) -> float | None:
        """The score of ``text`` if it was computed already, without computing."""
        return self._scores.get((agent_text, text))
