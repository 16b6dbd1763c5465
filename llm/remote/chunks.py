"""The events of a streamed chat completion: each one's ``data`` is a JSON chunk whose
``choices[0].delta.content`` continues the reply, ``[DONE]`` ends it, and a service may send
an ``error`` object instead of a chunk."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

DONE = "[DONE]"


class ServiceError(Exception):
    """The service answered, but with an error instead of the reply; the message says why."""


class _Part(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Delta(_Part):
    content: str | None = None


class _Choice(_Part):
    index: int = 0
    delta: _Delta = _Delta()


class _Error(_Part):
    message: str = "no message"


class _Chunk(_Part):
    choices: list[_Choice] = []
    error: _Error | None = None


def chunk_text(data: str) -> str:
    """The reply text one event adds (``""`` for a chunk without any, such as the role or the
    finish reason); ``ServiceError`` for an error event, pydantic's ``ValidationError`` for
    anything that is not a chunk."""
    chunk = _Chunk.model_validate_json(data)
    if chunk.error is not None:
        raise ServiceError(f"the service reported an error in the stream: {chunk.error.message}")
    return "".join(choice.delta.content or "" for choice in chunk.choices if choice.index == 0)


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
