"""The Twilio Media Streams wire format and the playback ledger fed by echoed marks: no models,
no sockets — the messages of both sides, and the arithmetic barge-in truncation rests on."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest

from cadence.pipeline.frames import AudioOutFrame
from cadence.pipeline.playback_ledger import PlaybackLedger
from cadence.pipeline.stages.playout import PlaybackConfirmingOutput
from cadence.voice.audio import ulaw_decode
from cadence.web.serializers.twilio import (
    MAX_MESSAGE_BYTES,
    ClearMessage,
    ConnectedMessage,
    DTMFMessage,
    MarkMessage,
    MediaMessage,
    StartMessage,
    StopMessage,
    TwilioMessage,
    TwilioMessageError,
    UnknownEventError,
    encode,
    parse_message,
)
from cadence.web.transports.twilio import TwilioAudioOutput

# Messages as Twilio sends them (shapes from its Media Streams documentation).
START = {
    "event": "start",
    "sequenceNumber": "1",
    "start": {
        "accountSid": "AC" + "0" * 32,
        "streamSid": "MZ" + "1" * 32,
        "callSid": "CA" + "2" * 32,
        "tracks": ["inbound"],
        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
        "customParameters": {"overlay": "brisk"},
    },
    "streamSid": "MZ" + "1" * 32,
}
MEDIA = {
    "event": "media",
    "sequenceNumber": "3",
    "media": {"track": "inbound", "chunk": "1", "timestamp": "5", "payload": "//8A"},
    "streamSid": "MZ" + "1" * 32,
}


def test_each_event_twilio_sends_is_read() -> None:
    connected = parse_message('{"event": "connected", "protocol": "Call", "version": "1.0.0"}')
    assert isinstance(connected, ConnectedMessage)

    start = parse_message(json.dumps(START))
    assert isinstance(start, StartMessage)
    assert start.sid == "MZ" + "1" * 32
    assert start.start.custom_parameters == {"overlay": "brisk"}
    assert start.start.media_format.supported

    media = parse_message(json.dumps(MEDIA))
    assert isinstance(media, MediaMessage)
    assert media.media.audio() == b"\xff\xff\x00"
    assert ulaw_decode(media.media.audio()).tolist()[:2] == [0, 0]  # 0xff is μ-law silence

    dtmf = parse_message(
        '{"event": "dtmf", "streamSid": "MZ1", "sequenceNumber": "5",'
        ' "dtmf": {"track": "inbound_track", "digit": "1"}}'
    )
    assert isinstance(dtmf, DTMFMessage)
    assert dtmf.dtmf.digit == "1"

    mark = parse_message(
        '{"event": "mark", "sequenceNumber": "4", "streamSid": "MZ1", "mark": {"name": "0.7"}}'
    )
    assert isinstance(mark, MarkMessage)
    assert mark.mark.name == "0.7"

    stop = parse_message(
        '{"event": "stop", "sequenceNumber": "6", "streamSid": "MZ1",'
        ' "stop": {"accountSid": "AC1", "callSid": "CA1"}}'
    )
    assert isinstance(stop, StopMessage)
    assert stop.stop.call_sid == "CA1"


def test_messages_to_twilio_use_its_field_names() -> None:
    media = MediaMessage.model_validate({"streamSid": "MZ1", "media": {"payload": "AAAA"}})
    assert json.loads(encode(media)) == {
        "event": "media",
        "streamSid": "MZ1",
        "media": {"payload": "AAAA"},
    }
    mark = MarkMessage.model_validate({"streamSid": "MZ1", "mark": {"name": "3.1"}})
    assert json.loads(encode(mark)) == {
        "event": "mark",
        "streamSid": "MZ1",
        "mark": {"name": "3.1"},
    }
    clear = ClearMessage(stream_sid="MZ1")
    assert json.loads(encode(clear)) == {"event": "clear", "streamSid": "MZ1"}


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object with an `event`"),
        ('{"no_event": 1}', "not a JSON object with an `event`"),
        (b"\x00\x01", "binary message"),
        ('{"event": "media", "streamSid": "MZ1"}', "bad media message: media: Field required"),
        (json.dumps(START | {"start": {"streamSid": "MZ1"}}), "start.mediaFormat: Field required"),
        ("x" * (MAX_MESSAGE_BYTES + 1), "over 16384"),
    ],
)
def test_a_message_that_cannot_be_read_says_why(raw: str | bytes, reason: str) -> None:
    with pytest.raises(TwilioMessageError, match=re.escape(reason)):
        parse_message(raw)


def test_an_unknown_event_is_its_own_error() -> None:
    with pytest.raises(UnknownEventError, match="'transcription'"):
        parse_message('{"event": "transcription", "streamSid": "MZ1"}')


def test_bad_base64_is_reported_when_the_audio_is_read() -> None:
    media = parse_message(json.dumps(MEDIA | {"media": {"payload": "not base64!"}}))
    assert isinstance(media, MediaMessage)
    with pytest.raises(TwilioMessageError, match="not base64"):
        media.media.audio()


def _frame(reply_index: int) -> AudioOutFrame:
    """20 ms of reply audio at 8 kHz."""
    return AudioOutFrame(
        pcm=np.full(160, 1000, np.int16),
        sample_rate=8000,
        timestamp_ms=0.0,
        reply_index=reply_index,
    )


async def test_the_ledger_counts_only_audio_whose_mark_twilio_echoed() -> None:
    sent: list[TwilioMessage] = []
    output = TwilioAudioOutput("MZ1", sent.append)
    assert isinstance(output, PlaybackConfirmingOutput)
    ledger = PlaybackLedger()
    output.attach(ledger)
    ledger.phrase(0, "one two three four", 0.0, 100.0)

    for _ in range(5):
        await output.send(_frame(0))
    kinds = [m.event for m in sent]
    assert kinds == ["media", "mark"] * 5  # a mark after each chunk
    media = sent[0]
    assert isinstance(media, MediaMessage)
    assert len(base64.b64decode(media.media.payload)) == 160  # 20 ms of μ-law at 8 kHz
    marks = [m.mark.name for m in sent if isinstance(m, MarkMessage)]
    assert len(set(marks)) == 5

    assert ledger.played_ms(0) == 0.0  # sent is not heard
    assert output.echoed(marks[0])
    assert output.echoed(marks[1])
    assert ledger.played_ms(0) == 40.0
    assert ledger.heard_text(0) == "one"

    await output.clear()
    assert isinstance(sent[-1], ClearMessage)
    # Twilio echoes the flushed marks too: that audio was never played.
    assert not output.echoed(marks[2])
    assert not output.echoed("someone-else's")
    assert ledger.played_ms(0) == 40.0
    assert not ledger.finished(0)


async def test_a_reply_is_finished_when_the_mark_after_its_last_audio_comes_back() -> None:
    sent: list[TwilioMessage] = []
    output = TwilioAudioOutput("MZ1", sent.append)
    ledger = PlaybackLedger()
    output.attach(ledger)
    await output.send(_frame(3))
    await output.end_of_reply(3)
    audio_mark, end_mark = (m.mark.name for m in sent if isinstance(m, MarkMessage))
    assert output.echoed(audio_mark)
    assert not ledger.finished(3)
    assert output.echoed(end_mark)
    assert ledger.finished(3)
    assert ledger.played_ms(3) == 20.0


async def test_audio_at_another_rate_is_refused() -> None:
    output = TwilioAudioOutput("MZ1", lambda message: None)
    frame = AudioOutFrame(
        pcm=np.zeros(320, np.int16), sample_rate=16000, timestamp_ms=0.0, reply_index=0
    )
    with pytest.raises(ValueError, match="8000 Hz"):
        await output.send(frame)
