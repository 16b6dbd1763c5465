"""The WebRTC audio plumbing on its own: the paced outbound track and the mix-down of what
the browser sends."""

from __future__ import annotations

import asyncio
import time
from fractions import Fraction

import numpy as np
import pytest
from aiortc import MediaStreamError
from av import AudioFrame

from cadence.pipeline.frames import AudioOutFrame
from cadence.voice.audio import PCM16
from cadence.web.transports import PacedAudioTrack
from cadence.web.transports.webrtc import mono_pcm16


def ramp(n: int, start: int = 1) -> PCM16:
    return np.arange(start, start + n, dtype=np.int16)


async def test_the_track_sends_20_ms_frames_of_what_it_was_given_then_silence() -> None:
    track = PacedAudioTrack(48000)
    await track.send(
        AudioOutFrame(pcm=ramp(1440), sample_rate=48000, timestamp_ms=0.0, reply_index=0)
    )
    frames = [await track.recv() for _ in range(3)]
    assert [f.pts for f in frames] == [0, 960, 1920]
    assert all(f.samples == 960 and f.sample_rate == 48000 for f in frames)
    assert frames[0].time_base == Fraction(1, 48000)
    played = np.concatenate([f.to_ndarray()[0] for f in frames])
    np.testing.assert_array_equal(played[:1440], ramp(1440))
    assert not played[1440:].any()
    track.stop()


async def test_the_track_keeps_the_pace_of_real_time() -> None:
    track = PacedAudioTrack(48000)
    started = time.monotonic()
    for _ in range(11):
        await track.recv()
    assert time.monotonic() - started >= 0.19  # ten intervals of 20 ms after the first frame
    track.stop()


async def test_clear_drops_what_is_waiting() -> None:
    track = PacedAudioTrack(16000)
    track.play(ramp(16000))
    await track.clear()
    assert not (await track.recv()).to_ndarray().any()
    track.stop()


async def test_the_track_refuses_audio_at_another_rate_and_ends_when_stopped() -> None:
    track = PacedAudioTrack(48000)
    with pytest.raises(ValueError, match="48000 Hz"):
        await track.send(
            AudioOutFrame(pcm=ramp(320), sample_rate=16000, timestamp_ms=0.0, reply_index=0)
        )
    track.stop()
    with pytest.raises(MediaStreamError):
        await asyncio.wait_for(track.recv(), 1)


@pytest.mark.parametrize("layout_format", [("stereo", "s16"), ("stereo", "s16p"), ("mono", "s16")])
def test_browser_audio_is_mixed_down_to_mono(layout_format: tuple[str, str]) -> None:
    layout, sample_format = layout_format
    left, right = ramp(960, 0) * 2, np.zeros(960, dtype=np.int16)
    if layout == "mono":
        samples = left.reshape(1, -1)
    elif sample_format == "s16p":
        samples = np.stack([left, right])
    else:
        samples = np.stack([left, right], axis=1).reshape(1, -1)
    frame = AudioFrame.from_ndarray(samples, format=sample_format, layout=layout)
    frame.sample_rate = 48000
    expected = left if layout == "mono" else left // 2
    np.testing.assert_array_equal(mono_pcm16(frame), expected)
