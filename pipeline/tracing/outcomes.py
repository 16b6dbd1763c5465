"""What became of a turn, in one word: every turn has exactly one outcome, so that a report or
a metric that counts turns can leave none out.

The outcome is read off the trace alone, in this order — the first that applies:

1. ``failed``: a stage failed or ran past its time limit (``failure``, ``stt_error``,
   ``llm_error``): the caller heard a fallback phrase, or nothing.
2. ``talked_over``: the reply was heard before the caller's end of speech — the agent spoke
   while the caller was still talking. With a benchmark's ground truth this is exact; on a
   live server it is as the VAD saw it. This holds even for a reply the engine then
   withdrew: the caller heard it.
3. ``withdrawn``: committed too early and taken back before any of the reply was heard (the
   caller went on; the turn continues in the next one).
4. ``unanswered``: no reply was heard (the call ended first, or the engine never answered).
5. ``interrupted``: answered after the end of speech, then cut by the caller's barge-in.
6. ``answered``: answered after the end of speech, and heard out.

A caller's utterance the engine split into several turns (it committed at a pause, then the
caller went on) has one outcome too, ``utterance_outcome``, folded from its turns' outcomes:
``failed`` if any failed, else ``talked_over`` if any was, else ``answered`` if any reply came
after the end of speech (heard out or interrupted), else ``unanswered`` — a withdrawn early
commit is not an outcome of the utterance, only of its turn.

"Heard" is ``audio_heard_first`` where the caller measured it (a trace annotated
``caller_measured``: one without ``audio_heard_first`` then was never heard), else the
server's ``audio_out_first``.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from cadence.pipeline.tracing.anchors import AnchorEvent
from cadence.pipeline.tracing.turn_trace import TurnTrace

CALLER_MEASURED = "caller_measured"
"""The annotation of a trace whose ``audio_heard_first`` the caller measured (benchmarks)."""

ERROR_ANNOTATIONS = ("failure", "stt_error", "llm_error")
"""Annotations that say a stage of the turn failed (docs/trace-schema.md)."""


class TurnOutcome(StrEnum):
    ANSWERED = "answered"
    INTERRUPTED = "interrupted"
    TALKED_OVER = "talked_over"
    UNANSWERED = "unanswered"
    FAILED = "failed"
    WITHDRAWN = "withdrawn"


ANSWERED_IN_TIME = frozenset({TurnOutcome.ANSWERED, TurnOutcome.INTERRUPTED})
"""The outcomes of a reply that came after the caller had finished: the turns whose latency
means something."""


def heard_at_ms(turn: TurnTrace) -> float | None:
    """When the caller began to hear the reply: the caller's own measure where it measured,
    else the server's first frame sent; ``None`` if the reply was not heard (or not sent)."""
    events = turn.events
    if turn.annotations.get(CALLER_MEASURED) is True:
        return events.get(AnchorEvent.AUDIO_HEARD_FIRST)
    return events.get(AnchorEvent.AUDIO_OUT_FIRST)


def turn_outcome(turn: TurnTrace) -> TurnOutcome:
    """The one outcome of ``turn`` (the order is the module's docstring)."""
    if any(turn.annotations.get(key) for key in ERROR_ANNOTATIONS):
        return TurnOutcome.FAILED
    heard = heard_at_ms(turn)
    speech_end = turn.events.get(AnchorEvent.USER_SPEECH_END)
    if heard is not None and speech_end is not None and heard < speech_end:
        return TurnOutcome.TALKED_OVER
    if turn.annotations.get("withdrawn") is True:
        return TurnOutcome.WITHDRAWN
    if heard is None:
        return TurnOutcome.UNANSWERED
    if AnchorEvent.INTERRUPTED in turn.events:
        return TurnOutcome.INTERRUPTED
    return TurnOutcome.ANSWERED


def talked_over_by_ms(turn: TurnTrace) -> float | None:
    """How long before the caller's end of speech the reply was heard (positive), for a
    talked-over turn; ``None`` for any other."""
    heard, speech_end = heard_at_ms(turn), turn.events.get(AnchorEvent.USER_SPEECH_END)
    if turn_outcome(turn) is not TurnOutcome.TALKED_OVER or heard is None or speech_end is None:
        return None
    return speech_end - heard


def utterance_outcome(turns: Iterable[TurnTrace]) -> TurnOutcome:
    """The one outcome of a caller's utterance played as ``turns`` (the module's docstring):
    ``failed``, ``talked_over``, ``answered`` or ``unanswered``."""
    outcomes = {turn_outcome(turn) for turn in turns}
    if TurnOutcome.FAILED in outcomes:
        return TurnOutcome.FAILED
    if TurnOutcome.TALKED_OVER in outcomes:
        return TurnOutcome.TALKED_OVER
    if outcomes & ANSWERED_IN_TIME:
        return TurnOutcome.ANSWERED
    return TurnOutcome.UNANSWERED
