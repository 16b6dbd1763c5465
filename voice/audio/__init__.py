"""Audio plumbing shared by stages and transports: PCM conversion, framing, resampling, G.711."""

from cadence.voice.audio.framing import AudioFramer
from cadence.voice.audio.g711 import ulaw_decode, ulaw_encode
from cadence.voice.audio.pcm import PCM16, float_to_pcm16, level_db, pcm16_to_float
from cadence.voice.audio.resample import StreamResampler, resample

__all__ = [
    "PCM16",
    "AudioFramer",
    "StreamResampler",
    "float_to_pcm16",
    "level_db",
    "pcm16_to_float",
    "resample",
    "ulaw_decode",
    "ulaw_encode",
]
