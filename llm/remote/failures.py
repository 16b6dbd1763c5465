"""Why a reply from the service failed, in one line for the log and the turn's trace."""

from __future__ import annotations

import httpx2
from pydantic import ValidationError

from cadence.llm.remote.chunks import ServiceError

_MAX_CHARS = 300


def describe_failure(exc: Exception, api_key: str) -> str:
    """The reason ``exc`` ended a reply. The API key never appears in it, even where a service
    echoes it back in an error message."""
    match exc:
        case ServiceError():
            reason = str(exc)
        case httpx2.TimeoutException():
            reason = f"timed out talking to the service ({type(exc).__name__})"
        case httpx2.TransportError():
            reason = f"connection failed: {_root_cause(exc)}"
        case ValidationError():
            reason = f"malformed event: not a chat-completion chunk ({exc.errors()[0]['msg']})"
        case _:
            reason = f"unexpected failure: {type(exc).__name__}: {exc}"
    reason = " ".join(reason.replace(api_key, "[API key]").split())
    return reason if len(reason) <= _MAX_CHARS else reason[: _MAX_CHARS - 1] + "…"


def _root_cause(exc: BaseException) -> str:
    """What the network layer said in the end: the client wraps the socket's error
    (``Connection refused``, ``Name or service not known``) in layers of its own."""
    for _ in range(8):  # a cause chain is short; this only guards against a cycle
        if isinstance(exc, BaseExceptionGroup):
            exc = exc.exceptions[0]
        elif (inner := exc.__cause__ or exc.__context__) is not None:
            exc = inner
        else:
            break
    return str(exc) or type(exc).__name__
