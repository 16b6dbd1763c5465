"""Asterisk AudioSocket: the frames of its TCP stream, read and written.

Every frame is a 3-byte header — the kind (1 byte) and the payload's length (2 bytes, big
endian) — and the payload. Asterisk (``AudioSocket(uuid,host:port)`` in the dialplan, or
``Dial(AudioSocket/host:port/uuid)``) sends the call's UUID first, then the caller's audio
and key presses; it accepts audio and a hang-up back. The kinds, and the payloads accepted:

* ``0x00`` ``Hangup`` — none (closing the socket hangs up too);
* ``0x01`` ``CallUUID`` — the call's UUID, 16 bytes;
* ``0x03`` ``DTMF`` — 1 byte, an ASCII DTMF digit (0-9, ``*``, ``#``, A-D);
* ``0x10`` ``Audio`` — signed 16-bit little-endian PCM, 8 kHz mono: an even number of bytes,
  2 to 16,000;
* ``0xff`` ``Error`` — an optional 1-byte error code (Asterisk's are bits: ``_ASTERISK_ERRORS``).

Asterisk sends 20 ms audio frames (320 bytes); a second of audio is the most a frame may
carry here, so that a corrupt length is caught at once instead of swallowing the next frames.
Newer Asterisk versions also define audio kinds at other rates (0x11 and up, for the channel
driver with a wideband codec); those are refused like any other unknown kind, since the
dialplan application always sends 0x10.

Any frame that breaks these rules raises :class:`AudioSocketProtocolError`: after one, the
stream cannot be trusted to be at a frame boundary any more.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field
from enum import IntEnum
from uuid import UUID

import numpy as np

from cadence.pipeline.session import DTMF_DIGITS
from cadence.voice.audio import PCM16

SAMPLE_RATE = 8000
"""The rate of ``Audio`` frames, both ways."""

FRAME_SAMPLES = SAMPLE_RATE * 20 // 1000
"""Samples in a 20 ms frame: the size Asterisk sends, and the most ``encode_audio`` puts in
one frame."""

MAX_AUDIO_BYTES = 2 * SAMPLE_RATE
"""The largest audio payload accepted: one second."""

_HEADER = struct.Struct(">BH")
_PCM = np.dtype("<i2")
_ASTERISK_ERRORS = {
    0x01: "the caller hung up",
    0x02: "a frame could not be forwarded",
    0x04: "out of memory",
}
"""The bits of Asterisk's error codes."""


class AudioSocketProtocolError(Exception):
    """The peer broke the framing; the connection cannot go on."""


class Kind(IntEnum):
    HANGUP = 0x00
    UUID = 0x01
    DTMF = 0x03
    AUDIO = 0x10
    ERROR = 0xFF


@dataclass(frozen=True)
class Hangup:
    """End the call."""


@dataclass(frozen=True)
class CallUUID:
    """The call's id, the first frame Asterisk sends (the dialplan's ``uuid`` argument)."""

    uuid: UUID


@dataclass(frozen=True)
class DTMF:
    """The caller pressed ``digit``."""

    digit: str


@dataclass(frozen=True)
class Audio:
    """Caller or reply audio at ``SAMPLE_RATE``."""

    pcm: PCM16 = field(compare=False)


@dataclass(frozen=True)
class Error:
    """The peer reports an error, with its code (``None`` when it sent none)."""

    code: int | None

    def __str__(self) -> str:
        if self.code is None:
            return "an error without a code"
        named = [text for bit, text in _ASTERISK_ERRORS.items() if self.code & bit]
        return f"error 0x{self.code:02x}" + (f" ({', '.join(named)})" if named else "")


Frame = Hangup | CallUUID | DTMF | Audio | Error


async def read_frame(reader: asyncio.StreamReader) -> Frame | None:
    """The next frame; ``None`` when the connection closed between two frames (a hang-up
    without the frame). Raises ``AudioSocketProtocolError`` for a frame that breaks the
    rules, or a connection that closed in the middle of one."""
    try:
        header = await reader.readexactly(_HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise AudioSocketProtocolError(
            f"truncated header: the connection closed after {len(exc.partial)} of "
            f"{_HEADER.size} bytes"
        ) from None
    code, length = _HEADER.unpack(header)
    kind = _kind(code)
    _check_length(kind, length)  # before reading: a corrupt length must not swallow the stream
    try:
        payload = await reader.readexactly(length)
    except asyncio.IncompleteReadError as exc:
        raise AudioSocketProtocolError(
            f"truncated {kind.name.lower()} frame: the connection closed after "
            f"{len(exc.partial)} of {length} payload bytes"
        ) from None
    return decode(kind, payload)


def decode(kind: Kind, payload: bytes) -> Frame:
    """The frame of ``kind`` carrying ``payload``, checked against the rules above."""
    _check(kind, payload)
    match kind:
        case Kind.HANGUP:
            return Hangup()
        case Kind.UUID:
            return CallUUID(UUID(bytes=payload))
        case Kind.DTMF:
            return DTMF(payload.decode("ascii"))
        case Kind.AUDIO:
            return Audio(np.frombuffer(payload, dtype=_PCM).astype(np.int16))
        case Kind.ERROR:
            return Error(payload[0] if payload else None)


def encode_frame(frame: Frame) -> bytes:
    """``frame`` as it goes on the wire; ``ValueError`` if it breaks the rules above."""
    match frame:
        case Hangup():
            kind, payload = Kind.HANGUP, b""
        case CallUUID():
            kind, payload = Kind.UUID, frame.uuid.bytes
        case DTMF():
            kind, payload = Kind.DTMF, frame.digit.encode("ascii", errors="replace")
        case Audio():
            kind, payload = Kind.AUDIO, frame.pcm.astype(_PCM, copy=False).tobytes()
        case Error():
            kind, payload = Kind.ERROR, b"" if frame.code is None else bytes([frame.code])
    try:
        _check(kind, payload)
    except AudioSocketProtocolError as exc:
        raise ValueError(f"cannot encode {frame!r}: {exc}") from None
    return _HEADER.pack(kind, len(payload)) + payload


def encode_audio(pcm: PCM16) -> bytes:
    """``pcm`` (8 kHz) as audio frames of at most 20 ms each, back to back."""
    return b"".join(
        encode_frame(Audio(pcm[start : start + FRAME_SAMPLES]))
        for start in range(0, len(pcm), FRAME_SAMPLES)
    )


_FIXED_LENGTHS = {Kind.HANGUP: 0, Kind.UUID: 16, Kind.DTMF: 1}


def _kind(code: int) -> Kind:
    try:
        return Kind(code)
    except ValueError:
        raise AudioSocketProtocolError(f"unknown frame kind 0x{code:02x}") from None


def _check_length(kind: Kind, length: int) -> None:
    name = kind.name.lower()
    if kind in _FIXED_LENGTHS and length != _FIXED_LENGTHS[kind]:
        raise AudioSocketProtocolError(
            f"{name} frame of {length} bytes (it has {_FIXED_LENGTHS[kind]})"
        )
    if kind is Kind.AUDIO and (length % 2 or not 2 <= length <= MAX_AUDIO_BYTES):
        raise AudioSocketProtocolError(
            f"{name} frame of {length} bytes (an even number from 2 to {MAX_AUDIO_BYTES})"
        )
    if kind is Kind.ERROR and length > 1:
        raise AudioSocketProtocolError(f"{name} frame of {length} bytes (0 or 1)")


def _check(kind: Kind, payload: bytes) -> None:
    _check_length(kind, len(payload))
    if kind is Kind.DTMF and not DTMF_DIGITS.fullmatch(payload.decode("ascii", "replace")):
        raise AudioSocketProtocolError(f"DTMF payload {payload!r} is not a DTMF digit")
