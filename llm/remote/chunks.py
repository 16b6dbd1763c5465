"""The events of a streamed chat completion: each one's ``data`` is a JSON chunk whose
``choices[0].delta`` continues the reply — its ``content`` with words, its ``tool_calls`` with
fragments of the calls — ``[DONE]`` ends it, and a service may send an ``error`` object instead
of a chunk."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

DONE = "[DONE]"


class ServiceError(Exception):
    """The service answered, but with an error instead of the reply; the message says why."""


class _Part(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FunctionDelta(_Part):
    name: str | None = None
    """Normally whole, in a call's first delta only."""
    arguments: str | None = None
    """The next fragment of the arguments' JSON text."""


class ToolCallDelta(_Part):
    """A fragment of one tool call: the deltas of a call share its ``index``, and the first
    normally carries its ``id`` and name."""

    index: int = 0
    id: str | None = None
    function: FunctionDelta | None = None


class Delta(_Part):
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class _Choice(_Part):
    index: int = 0
    delta: Delta = Delta()


class _Error(_Part):
    message: str = "no message"


class _Chunk(_Part):
    choices: list[_Choice] = []
    error: _Error | None = None


def chunk_delta(data: str) -> Delta:
    """What one event adds to the reply (an empty delta for a chunk without anything, such as
    the role or the finish reason); ``ServiceError`` for an error event, pydantic's
    ``ValidationError`` for anything that is not a chunk."""
    chunk = _Chunk.model_validate_json(data)
    if chunk.error is not None:
        raise ServiceError(f"the service reported an error in the stream: {chunk.error.message}")
    return next((choice.delta for choice in chunk.choices if choice.index == 0), Delta())


def error_message(body: bytes) -> str:
    """The message of an HTTP error's body: OpenAI-style JSON (``{"error": {"message"}}``),
    else the body's text."""
    try:
        error = _Chunk.model_validate_json(body).error
    except ValueError:  # not JSON, or not shaped like an error
        error = None
    if error is not None:
        return error.message
    return body.decode("utf-8", errors="replace").strip() or "no message"
