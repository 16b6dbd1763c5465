"""Audio utilities: PCM conversion, framing, streaming resampling and G.711 μ-law."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cadence.voice.audio import (
    AudioFramer,
    StreamResampler,
    float_to_pcm16,
    pcm16_to_float,
    resample,
    ulaw_decode,
    ulaw_encode,
)

ALL_INT16 = np.arange(-32768, 32768, dtype=np.int16)
ULAW_GOLDEN = Path(__file__).parent / "data" / "g711" / "ulaw_golden.npz"
"""The classic G.711 μ-law codec's output for every input (``make_ulaw_golden.py`` beside it)."""


def tone(freq: float, rate: int, seconds: float = 1.0, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return float_to_pcm16(amplitude * np.sin(2 * np.pi * freq * t))


def test_pcm16_float_round_trip_is_exact_for_every_value() -> None:
    floats = pcm16_to_float(ALL_INT16)
    assert floats.dtype == np.float32
    assert floats.min() == -1.0
    assert floats.max() < 1.0
    assert np.array_equal(float_to_pcm16(floats), ALL_INT16)


def test_float_to_pcm16_saturates_instead_of_wrapping() -> None:
    assert float_to_pcm16(np.array([1.5, -2.0, 0.0])).tolist() == [32767, -32768, 0]


def test_framer_cuts_any_chunking_into_the_same_frames() -> None:
    rng = np.random.default_rng(0)
    signal = rng.integers(-32768, 32767, 16000, dtype=np.int16)
    framer = AudioFramer(16000, 20)
    frames: list[np.ndarray] = []
    position = 0
    while position < len(signal):
        size = int(rng.integers(1, 900))
        frames += framer.push(signal[position : position + size])
        position += size
    assert all(len(f) == 320 for f in frames)
    tail = framer.flush()
    joined = np.concatenate(frames + ([tail] if tail is not None else []))
    assert np.array_equal(joined[: len(signal)], signal)
    assert not joined[len(signal) :].any()


def test_framer_rejects_impossible_frame_lengths_and_bad_samples() -> None:
    with pytest.raises(ValueError, match="whole number of samples"):
        AudioFramer(11025, 20)
    with pytest.raises(ValueError, match="int16"):
        AudioFramer(16000).push(np.zeros(10, dtype=np.float32))


@pytest.mark.parametrize(("in_rate", "out_rate"), [(48000, 16000), (8000, 16000), (22050, 48000)])
def test_streaming_resampler_is_continuous_across_chunk_borders(
    in_rate: int, out_rate: int
) -> None:
    signal = tone(440, in_rate, seconds=2.0)
    whole = resample(signal, in_rate, out_rate)
    stream = StreamResampler(in_rate, out_rate)
    chunk = in_rate // 50  # 20 ms
    pieces = [
        stream.process(signal[i : i + chunk], last=i + chunk >= len(signal))
        for i in range(0, len(signal), chunk)
    ]
    streamed = np.concatenate(pieces)
    assert abs(len(streamed) - len(signal) * out_rate / in_rate) <= 1
    assert len(streamed) == len(whole)
    # Chunking must not add clicks: the streamed signal equals the one-shot conversion
    # up to rounding of the last bit or two.
    assert np.max(np.abs(streamed.astype(int) - whole.astype(int))) <= 2
    # And it is still a clean 440 Hz tone.
    spectrum = np.abs(np.fft.rfft(streamed[out_rate // 2 : out_rate // 2 + out_rate]))
    assert abs(np.argmax(spectrum) - 440) <= 1


@pytest.mark.parametrize(("in_rate", "out_rate"), [(48000, 16000), (8000, 16000), (22050, 8000)])
def test_streaming_resampler_holds_back_only_a_few_milliseconds(
    in_rate: int, out_rate: int
) -> None:
    # Whatever the converter keeps after a chunk is latency every live turn pays.
    stream = StreamResampler(in_rate, out_rate)
    chunk = tone(440, in_rate, seconds=0.02)
    produced = 0
    for chunks in range(1, 51):
        produced += len(stream.process(chunk))
        held_ms = 20 * chunks - 1000 * produced / out_rate
        assert held_ms <= 10, f"{held_ms:.1f} ms held back after {chunks} chunks"


def test_resampling_down_filters_out_what_would_alias() -> None:
    # 10 kHz cannot exist at 16 kHz; a naive interpolation folds it down to 6 kHz.
    out = resample(tone(10_000, 48000), 48000, 16000)
    assert np.sqrt(np.mean(out.astype(float) ** 2)) < 0.01 * 0.5 * 32768 / np.sqrt(2)


def test_same_rate_is_passed_through() -> None:
    signal = tone(300, 16000)
    assert StreamResampler(16000, 16000).process(signal) is signal


def test_ulaw_known_codes() -> None:
    assert ulaw_encode(np.array([0, -1, 32767, -32768], dtype=np.int16)).tolist() == [
        0xFF,
        0x7E,  # -1 is -1 in 14 bits too: the smallest negative code, not negative zero
        0x80,
        0x00,
    ]
    assert ulaw_decode(bytes([0xFF, 0x80, 0x00])).tolist() == [0, 32124, -32124]


def test_ulaw_is_bit_exact_with_the_classic_codec_over_all_inputs() -> None:
    # The classic codec's (audioop's) answer for every input, stored once: audioop left
    # Python in 3.13, and this check must run on every version (see make_ulaw_golden.py).
    with np.load(ULAW_GOLDEN) as golden:
        encoded, decoded = golden["encoded"], golden["decoded"]
    assert (encoded.dtype, decoded.dtype) == (np.uint8, np.int16)
    assert np.array_equal(ulaw_encode(ALL_INT16), encoded)
    assert np.array_equal(ulaw_decode(np.arange(256, dtype=np.uint8)), decoded)
    # The table is G.711's: spot values from the standard's segment ends.
    assert encoded[[32768, 32768 + 32767, 0]].tolist() == [0xFF, 0x80, 0x00]
    assert decoded[[0x00, 0x7F, 0x80, 0xFF]].tolist() == [-32124, 0, 32124, 0]


def test_ulaw_round_trip_error_stays_within_its_segment() -> None:
    decoded = ulaw_decode(ulaw_encode(ALL_INT16)).astype(np.int32)
    error = np.abs(decoded - ALL_INT16.astype(np.int32))
    # The step doubles per segment: half a top-segment step (512) plus the 14-bit truncation
    # (3); above 32124 the codec clips.
    assert error[np.abs(ALL_INT16.astype(np.int32)) <= 32124].max() <= 515
    # Every code decodes to a value that encodes back to it, except 0x7F: "negative zero".
    codes = np.array([c for c in range(256) if c != 0x7F], dtype=np.uint8)
    assert np.array_equal(ulaw_encode(ulaw_decode(codes)), codes)
