"""Which moment a report's voice-to-voice ends at, and each turn's voice-to-voice (and decision
→ sound) by it.

A report's headline is what the caller hears (``audio_heard_first``) when the caller measured
every turn — a benchmark's emulated phone, page or recording. Traces a server wrote alone
(its session log, a load test's server side) cannot know that, and their report ends at the
server's first frame sent (``audio_out_first``) and says so: one anchor for every turn of a
report, never a mix.
"""

from __future__ import annotations

from collections.abc import Sequence

from cadence.pipeline.tracing import CALLER_MEASURED, AnchorEvent, TurnOutcome, TurnTrace
from cadence.pipeline.tracing import turn_outcome as outcome_of


def end_anchor(turns: Sequence[TurnTrace]) -> AnchorEvent:
    """``audio_heard_first`` if the caller measured every turn (withdrawn ones aside: nothing
    of them was heard), else ``audio_out_first``."""
    caller_turns = [turn for turn in turns if outcome_of(turn) is not TurnOutcome.WITHDRAWN]
    measured = [turn.annotations.get(CALLER_MEASURED) is True for turn in caller_turns]
    if measured and all(measured):
        return AnchorEvent.AUDIO_HEARD_FIRST
    return AnchorEvent.AUDIO_OUT_FIRST


def decision_to_sound_ms(turn: TurnTrace, anchor: AnchorEvent) -> float | None:
    """From the end-of-turn decision (``endpoint``) to ``anchor``: the work that was still
    left when the turn was declared over. Near zero when the reply's first audio was already
    waiting in playout; ``None`` where either is missing."""
    decided, heard = turn.events.get(AnchorEvent.ENDPOINT), turn.events.get(anchor)
    return None if decided is None or heard is None else heard - decided


def voice_to_voice_ms(turn: TurnTrace, anchor: AnchorEvent) -> float | None:
    """From the end of the caller's speech to ``anchor``; ``None`` where either is missing
    (negative for a reply heard before the caller finished)."""
    end, heard = turn.events.get(AnchorEvent.USER_SPEECH_END), turn.events.get(anchor)
    return None if end is None or heard is None else heard - end
