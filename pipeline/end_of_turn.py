"""``EndOfTurnDetector``: how long a silence must last before the caller's turn is over.

The VAD says where a silence began; whether the caller has finished is a question about
their words. The detector turns a transcript into P(the utterance is complete) — with the
model ``turn.end_of_turn.model`` names — and that P into a wait (:func:`end_of_turn_wait_ms`).
The engine keeps generating the reply during the wait, so the wait costs a complete turn
nothing but the wait itself.

With the language model (``lm``, the default) the work is spread over the caller's turn, so
that the answer is ready when the silence begins: :meth:`prepare` puts the context in the
call's cache when the caller starts speaking, :meth:`listen` extends it with each live partial
transcript and scores the speculative one at pause onset, and
:meth:`probability` of the final transcript then usually finds its score computed. The model
runs on one process-wide worker thread: urgent work (what a waiting caller's turn needs) before
background work (partials, prefill), one job at a time, so it never takes more than one core.
One detector per call: it holds the call's conversation cache.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from functools import cache
from typing import TypeVar

from cadence.core.priority import Priority, PriorityWorker
from cadence.core.stats import logit
from cadence.llm.pretrained import ScoredConversation, TurnEndModel
from cadence.pipeline.config import EndOfTurnConfig
from cadence.voice.turn import TextEndOfTurnModel
from cadence.voice.turn.numbers import number_goes_on

T = TypeVar("T")
logger = logging.getLogger(__name__)

_SENTENCE_END = re.compile(r"[.!?…][\"')\]]*$")
NUMBER_GOES_ON_P = 0.01
"""P at most, where the caller stops between the groups of a number they are reading."""


def end_of_turn_wait_ms(p: float, options: EndOfTurnConfig) -> float:
    """Silence after the end of speech to wait, for the calibrated P(complete) ``p``.

    Why this shape: P is the chance the turn is over when the silence begins. Each moment of
    silence that passes makes a mid-turn pause less likely — mid-turn pauses past the shortest
    fall off roughly exponentially, at ``pause_scale_ms`` — so after t ms of silence the odds
    that the turn is over are P/(1−P)·e^(t/scale). The commit comes when they reach
    ``confidence``'s: t = scale·(logit(confidence) − logit(P)), within ``min_wait_ms`` …
    ``max_wait_ms``. One knob (``confidence``) moves the whole rule along the trade-off
    between cut-offs and waiting, and every P has its own wait: no band, no steps."""
    z = logit(options.confidence, 1e-6) - logit(p, 1e-6)
    wait = options.pause_scale_ms * z
    return min(max(wait, float(options.min_wait_ms)), float(options.max_wait_ms))


MODELS = ("lm", "text")
"""The end-of-turn settings that read the words with a model (the others are rules)."""


def with_counted_digits(p: float, text: str, agent_text: str | None) -> float:
    """A model's P(complete) of ``text``, no more than ``NUMBER_GOES_ON_P`` where the words stop
    between the groups of a phone or card number (``voice/turn/numbers.py``)."""
    return min(p, NUMBER_GOES_ON_P) if number_goes_on(text, agent_text) else p


@cache
def _lm_worker() -> PriorityWorker:
    return PriorityWorker("end-of-turn-lm", threads=1)


class EndOfTurnDetector:
    def __init__(
        self,
        options: EndOfTurnConfig,
        text_model: TextEndOfTurnModel | None = None,
        lm: TurnEndModel | None = None,
    ) -> None:
        if options.model == "text" and text_model is None:
            raise ValueError("turn.end_of_turn.model is `text` but no text model was given")
        if options.model == "lm" and lm is None:
            raise ValueError("turn.end_of_turn.model is `lm` but no language model was given")
        self.options = options
        self._text_model = text_model
        self._lm = lm.session() if lm is not None and options.model == "lm" else None
        self._lm_lock = threading.Lock()  # the call's cache: one job at a time

    @property
    def conversation(self) -> ScoredConversation | None:
        """The call's conversation in the language model's KV cache (``lm`` only)."""
        return self._lm.conversation if self._lm is not None else None

    async def prepare(self, agent_text: str | None) -> None:
        """The caller started speaking after ``agent_text``: prefill what their words follow.
        A failure is only logged: :meth:`probability` will do the work again."""
        if self._lm is not None:
            session = self._lm
            try:
                await self._run_lm(lambda: session.prefill(agent_text), Priority.BACKGROUND)
            except Exception:
                logger.exception("end of turn: prefilling the language model failed")

    async def listen(self, text: str, *, agent_text: str | None, urgent: bool) -> None:
        """A transcript before the final one. ``urgent`` (the speculative transcript, at the
        pause): scored now, so that the final finds it done; else (a live partial) only put
        in the cache, so that the speculative one costs its new words and the score. A
        failure is only logged, as for :meth:`prepare`."""
        if self._lm is not None and text.strip():
            session = self._lm
            try:
                if urgent:
                    await self._run_lm(
                        lambda: session.probability(text, agent_text), Priority.URGENT
                    )
                else:
                    await self._run_lm(
                        lambda: session.extend(text, agent_text), Priority.BACKGROUND
                    )
            except Exception:
                logger.exception("end of turn: reading a transcript before the final failed")

    async def probability(self, text: str, *, agent_text: str | None = None) -> float:
        """P(the caller's utterance ``text`` is complete), after the agent said ``agent_text``:
        the model's, but no more than ``NUMBER_GOES_ON_P`` where the words stop between the
        groups of a phone or card number (``voice/turn/numbers.py``: a model reads words, it
        does not count digits)."""
        p = await self._model_probability(text, agent_text)
        return with_counted_digits(p, text, agent_text) if self.options.model in MODELS else p

    async def _model_probability(self, text: str, agent_text: str | None) -> float:
        match self.options.model:
            case "lm":
                assert self._lm is not None
                session = self._lm
                known = session.known(text, agent_text)
                if known is not None:
                    return known
                try:
                    return await self._run_lm(
                        lambda: session.probability(text, agent_text), Priority.URGENT
                    )
                except Exception:  # the call goes on, as if the words said nothing
                    logger.exception("end of turn: the language model failed; P taken as 0.5")
                    return 0.5
            case "text":
                assert self._text_model is not None
                return self._text_model.score(text, agent_text=agent_text)
            case "punctuation":
                return 1.0 if _SENTENCE_END.search(text.strip()) else 0.0
            case "silence":
                return 1.0

    def wait_ms(self, p: float) -> float:
        return end_of_turn_wait_ms(p, self.options)

    async def _run_lm(self, work: Callable[[], T], priority: Priority) -> T:
        def locked() -> T:
            with self._lm_lock:
                return work()

        return await _lm_worker().run(locked, priority=priority)
