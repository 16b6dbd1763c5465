"""One phone call placed from outside, against a server nothing is read from: each call judged
by what its caller heard, with the tracer's outcome rule (``pipeline/tracing/outcomes.py``) —
the rule every bench and report counts turns by — and, for a call that never got that far,
why (``CallFailure``).

``cadence bench-workers`` places these against ``cadence serve --workers N``; the benches
that run the server in their own process read its traces instead (``runners.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum

from websockets.exceptions import ConnectionClosed, InvalidStatus

from cadence.pipeline.tracing import (
    ANSWERED_IN_TIME,
    HEARD_VOICE_TO_VOICE,
    TurnOutcome,
    turn_outcome,
)
from cadence.tooling.bench.runners import CallerClip, speak_and_listen
from cadence.tooling.emulators.twilio import TwilioEmulator
from cadence.web.signaling import CloseCode


class CallFailure(StrEnum):
    """Why a call had no turn to judge."""

    REFUSED = "refused"
    """Closed with 1013 (full or draining) before any reply, or the handshake answered with
    an HTTP error (a worker of a draining pool closing its port as the call arrived: 503)."""
    CUT = "cut"
    """The server's side went away mid-call: closed without a reason the caller was owed, or
    the connection was lost."""
    UNREACHABLE = "unreachable"
    """The port did not take the connection (a server gone)."""


CallOutcome = TurnOutcome | CallFailure
"""What became of a call: its one turn's outcome, or why it had none."""

CALL_OUTCOMES: tuple[CallOutcome, ...] = (*TurnOutcome, *CallFailure)
"""Every outcome a call can have, each counted in a report even when none had it."""


@dataclass
class CallResult:
    caller: int
    started_s: float
    """When the call was placed, from the start of the run."""
    ended_s: float = 0.0
    outcome: CallOutcome = TurnOutcome.UNANSWERED
    voice_to_voice_ms: float | None = None
    detail: str = ""

    @property
    def served(self) -> bool:
        """The call reached a turn (whatever became of it)."""
        return isinstance(self.outcome, TurnOutcome)


async def converse(phone: TwilioEmulator, clip: CallerClip) -> tuple[TurnOutcome, float | None]:
    """On a call in progress, one turn (``speak_and_listen``): its outcome by the tracer's
    rule, and its voice-to-voice if it was answered after the end of speech."""
    trace = (await speak_and_listen(phone, clip)).trace(phone.stream_sid)
    outcome = turn_outcome(trace)
    heard_ms = trace.latencies_ms[HEARD_VOICE_TO_VOICE.name]
    return outcome, heard_ms if outcome in ANSWERED_IN_TIME else None


async def place_call(url: str, clip: CallerClip, result: CallResult, origin: float) -> None:
    """One call of one turn (``converse``), then a hang-up; ``result`` says how it went."""
    try:
        async with TwilioEmulator(url) as phone:
            result.outcome, result.voice_to_voice_ms = await converse(phone, clip)
    except ConnectionClosed as exc:
        received = exc.rcvd
        if received is not None and received.code == CloseCode.TRY_AGAIN_LATER:
            result.outcome = CallFailure.REFUSED
            result.detail = received.reason
        else:
            result.outcome = CallFailure.CUT
            result.detail = repr(exc)
    except InvalidStatus as exc:
        result.outcome = CallFailure.REFUSED
        result.detail = f"HTTP {exc.response.status_code}"
    except OSError as exc:
        result.outcome = CallFailure.UNREACHABLE
        result.detail = repr(exc)
    result.ended_s = time.monotonic() - origin
