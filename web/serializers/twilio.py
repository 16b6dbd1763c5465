"""Twilio Media Streams (bidirectional ``<Connect><Stream>``): the JSON messages of both sides.

Twilio sends ``connected``, ``start``, ``media``, ``dtmf``, ``mark`` and ``stop``; the
application sends ``media``, ``mark`` and ``clear``. One pydantic model per message serves
both directions — the server reads what Twilio sends and writes its replies with them, and
the Twilio emulator of the tests and the bench does the reverse — so the two sides cannot
drift apart. Field names are Twilio's camelCase on the wire and snake_case in Python.

Audio is G.711 μ-law at 8 kHz, mono, base64-encoded in ``media.payload``. Telnyx speaks the
same event set.
"""

from __future__ import annotations

import base64
import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.alias_generators import to_camel

ENCODING = "audio/x-mulaw"
SAMPLE_RATE = 8000
CHANNELS = 1

MAX_MESSAGE_BYTES = 16 * 1024
"""Far above any real message (a 20 ms media message is ~300 bytes; a start message with
custom parameters a few KB); a larger one is refused before it is parsed."""


class TwilioMessageError(ValueError):
    """A message that cannot be understood; the call goes on without it."""


class _Part(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="ignore"
    )


class MediaFormat(_Part):
    encoding: str
    sample_rate: int
    channels: int

    @property
    def supported(self) -> bool:
        return (self.encoding, self.sample_rate, self.channels) == (
            ENCODING,
            SAMPLE_RATE,
            CHANNELS,
        )


TELEPHONE_FORMAT = MediaFormat(encoding=ENCODING, sample_rate=SAMPLE_RATE, channels=CHANNELS)


class StreamStart(_Part):
    stream_sid: str | None = None
    account_sid: str = ""
    call_sid: str = ""
    tracks: list[str] = ["inbound"]
    custom_parameters: dict[str, str] = {}
    media_format: MediaFormat


class Media(_Part):
    payload: str
    """Base64 μ-law."""
    track: str | None = None
    chunk: str | None = None
    timestamp: str | None = None
    """Milliseconds since the stream started (Twilio's, on the inbound track)."""

    def audio(self) -> bytes:
        try:
            return base64.b64decode(self.payload, validate=True)
        except ValueError as exc:  # binascii.Error, or a payload that is not even ASCII
            raise TwilioMessageError(f"media payload is not base64: {exc}") from None


class DTMF(_Part):
    digit: str
    track: str | None = None


class Mark(_Part):
    name: str


class StreamStop(_Part):
    account_sid: str = ""
    call_sid: str = ""


class ConnectedMessage(_Part):
    event: Literal["connected"] = "connected"
    protocol: str = "Call"
    version: str = "1.0.0"


class StartMessage(_Part):
    event: Literal["start"] = "start"
    sequence_number: str | None = None
    stream_sid: str | None = None
    start: StreamStart

    @property
    def sid(self) -> str | None:
        """The stream's id, from wherever the message carries it."""
        return self.start.stream_sid or self.stream_sid


class MediaMessage(_Part):
    event: Literal["media"] = "media"
    sequence_number: str | None = None
    stream_sid: str | None = None
    media: Media


class DTMFMessage(_Part):
    event: Literal["dtmf"] = "dtmf"
    sequence_number: str | None = None
    stream_sid: str | None = None
    dtmf: DTMF


class MarkMessage(_Part):
    event: Literal["mark"] = "mark"
    sequence_number: str | None = None
    stream_sid: str | None = None
    mark: Mark


class StopMessage(_Part):
    event: Literal["stop"] = "stop"
    sequence_number: str | None = None
    stream_sid: str | None = None
    stop: StreamStop = StreamStop()


class ClearMessage(_Part):
    event: Literal["clear"] = "clear"
    stream_sid: str


TwilioMessage = (
    ConnectedMessage
    | StartMessage
    | MediaMessage
    | DTMFMessage
    | MarkMessage
    | StopMessage
    | ClearMessage
)

_ADAPTER: TypeAdapter[TwilioMessage] = TypeAdapter(
    Annotated[TwilioMessage, Field(discriminator="event")]
)
EVENTS = frozenset(("connected", "start", "media", "dtmf", "mark", "stop", "clear"))


class UnknownEventError(TwilioMessageError):
    """A well-formed message of an event this side does not know (a newer protocol, perhaps)."""


def parse_message(raw: str | bytes) -> TwilioMessage:
    """One websocket message, as sent by either side; ``TwilioMessageError`` says why not."""
    if isinstance(raw, bytes):
        raise TwilioMessageError(f"binary message of {len(raw)} bytes; the protocol is JSON text")
    if len(raw) > MAX_MESSAGE_BYTES:
        raise TwilioMessageError(f"message of {len(raw)} bytes, over {MAX_MESSAGE_BYTES}")
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise TwilioMessageError(f"not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("event"), str):
        raise TwilioMessageError("not a JSON object with an `event`")
    if data["event"] not in EVENTS:
        raise UnknownEventError(f"unknown event {data['event'][:40]!r}")
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, error['loc'][1:]))}: {error['msg']}" for error in exc.errors()
        )
        raise TwilioMessageError(f"bad {data['event']} message: {problems}") from None


def encode(message: TwilioMessage) -> str:
    """The wire form of ``message``: Twilio's field names, unset optional fields left out."""
    return message.model_dump_json(by_alias=True, exclude_none=True)


def media_message(stream_sid: str, ulaw: bytes) -> MediaMessage:
    return MediaMessage(
        stream_sid=stream_sid, media=Media(payload=base64.b64encode(ulaw).decode("ascii"))
    )
