"""P(the caller has finished their turn), read off a pretrained language model.

SmolLM2-Instruct was tuned on chats, where a user message ends with ``<|im_end|>``: asked for
the next token after the caller's words, written as a user message, it says how likely the
message is over. No training is involved — only a calibration of that probability on the
dialogue corpora (:class:`Calibration`).

Two details make it read speech rather than text:

* Whisper ends a transcript with a period as readily in a mid-sentence pause as at the end,
  so the final punctuation is removed, and the model's own expectation of it is summed over:
  P(end) = P(``<|im_end|>``) + Σ P(p) · P(``<|im_end|>`` | p) for p in ``.``, ``?``, ``!`` —
  the three continuations are scored in the same pass as the words (branch positions of
  :meth:`ConversationCache.log_probs`), so the sum costs no second pass.
* The agent's last words come first, as the assistant message the caller answers: "two" is a
  whole answer to "How many people?" and half of one to nothing.

One :class:`TurnEndSession` per call holds that call's conversation in the model's KV cache
(:class:`~cadence.llm.pretrained.language_model.ConversationCache`): the context is prefilled
while the caller speaks, and each transcript extends it from the first token that changed, so
the score of the final transcript is usually ready before it is asked for.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from cadence.llm.pretrained.language_model import ConversationCache, LanguageModel

SYSTEM_PROMPT = "You are a helpful voice assistant on a phone call."
"""Chosen on sgd_dev among none, SmolLM2's own default and this one (AUC 0.928 / 0.929 /
0.933, complete turns against prefixes cut at a random word)."""
SENTENCE_ENDS = (".", "?", "!")
CALIBRATION_RESOURCE = "turn_end_calibration.json"

_TRAILING = re.compile(r"[\s.,!?;:…]+$")


@dataclass(frozen=True)
class Calibration:
    """P(complete) = σ(``slope`` · logit(P(end)) + ``intercept``), fit on sgd_dev by
    ``cadence calibrate-turn-lm``; the identity until then."""

    slope: float = 1.0
    intercept: float = 0.0
    threshold: float = 0.5
    """The calibrated P at or above which an utterance counts as complete: chosen on the same
    corpus, to leave the largest margin over the targets (95 % of complete turns, 97 % of
    turns cut mid-sentence)."""
    metadata: dict[str, Any] | None = None

    def __call__(self, p_end: float) -> float:
        p = min(max(p_end, 1e-9), 1 - 1e-9)
        z = self.slope * math.log(p / (1 - p)) + self.intercept
        return 1 / (1 + math.exp(-z)) if z >= 0 else math.exp(z) / (1 + math.exp(z))

    @classmethod
    def shipped(cls) -> Calibration:
        resource = resources.files("cadence.llm.pretrained").joinpath(CALIBRATION_RESOURCE)
        if not resource.is_file():
            return cls()
        data = json.loads(resource.read_text())
        return cls(
            float(data["slope"]),
            float(data["intercept"]),
            float(data.get("threshold", 0.5)),
            data.get("metadata"),
        )


def spoken_words(text: str) -> str:
    """The transcript without the punctuation Whisper ended it with."""
    return _TRAILING.sub("", text.strip())


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
        self.conversation: ConversationCache = scorer.model.new_cache()
        """The call's conversation in the model's KV cache, for whatever else reads it."""
        self._scores: dict[tuple[str | None, str], float] = {}

    def prefill(self, agent_text: str | None) -> None:
        """Put the context of the caller's next words in the cache."""
        self.conversation.prefill(self._scorer.context(agent_text))

    def p_end(self, text: str, agent_text: str | None = None) -> float:
        """P(``<|im_end|>`` or a sentence end and then ``<|im_end|>``) after ``text``, the
        model's own probability (uncalibrated)."""
        words = spoken_words(text)
        if not words:
            return 0.0
        model = self._scorer.model
        ids = [*self._scorer.context(agent_text), *model.encode(words)]
        probs = self.conversation.log_probs(ids, self._scorer._ends).exp()
        end = model.chat.im_end
        after_mark = sum(
            float(probs[0, mark]) * float(probs[i + 1, end])
            for i, mark in enumerate(self._scorer._ends)
        )
        return min(float(probs[0, end]) + after_mark, 1.0)

    def probability(self, text: str, agent_text: str | None = None) -> float:
        """Calibrated P(the caller's utterance ``text`` is complete), remembered for the
        call's latest context: asking twice computes once."""
        key = (agent_text, text)
        if key not in self._scores:
            if self._scores and next(iter(self._scores))[0] != agent_text:
                self._scores.clear()  # a new turn: the old words will not come back
            self._scores[key] = self._scorer.calibration(self.p_end(text, agent_text))
        return self._scores[key]

    def known(self, text: str, agent_text: str | None = None) -> float | None:
        """The score of ``text`` if it was computed already, without computing."""
        return self._scores.get((agent_text, text))
