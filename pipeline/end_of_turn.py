"""``EndOfTurnDetector``: how long a silence must last before the caller's turn is over.

The VAD says where a silence began; whether the caller has finished is a question about
their words. The detector turns a transcript into P(the utterance is complete) — with the
model ``turn.end_of_turn.model`` names — and that P into a wait: ``min_wait_ms`` when the turn
is clearly over, ``max_wait_ms`` when it clearly is not, linearly between (``complete_at`` and
``incomplete_at`` bound the uncertain band). The engine keeps generating the reply during the
wait, so the wait costs a complete turn nothing but the wait itself.
"""

from __future__ import annotations

import re

from cadence.pipeline.config import EndOfTurnConfig
from cadence.voice.turn import TextEndOfTurnModel

_SENTENCE_END = re.compile(r"[.!?…][\"')\]]*$")


def end_of_turn_wait_ms(p: float, options: EndOfTurnConfig) -> float:
    """Silence after the end of speech to wait, for P(complete) ``p``."""
    band = options.complete_at - options.incomplete_at
    doubt = min(max((options.complete_at - p) / band, 0.0), 1.0)
    return options.min_wait_ms + (options.max_wait_ms - options.min_wait_ms) * doubt


class EndOfTurnDetector:
    def __init__(self, options: EndOfTurnConfig, text_model: TextEndOfTurnModel | None) -> None:
        if options.model == "text" and text_model is None:
            raise ValueError("turn.end_of_turn.model is `text` but no text model was given")
        self.options = options
        self._text_model = text_model

    def probability(self, text: str, *, agent_text: str | None = None) -> float:
        """P(the caller's utterance ``text`` is complete), after the agent said ``agent_text``."""
        match self.options.model:
            case "text":
                assert self._text_model is not None
                return self._text_model.score(text, agent_text=agent_text)
            case "punctuation":
                return 1.0 if _SENTENCE_END.search(text.strip()) else 0.0
            case "silence":
                return 1.0

    def wait_ms(self, p: float) -> float:
        return end_of_turn_wait_ms(p, self.options)
