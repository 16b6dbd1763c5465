"""Transports: how a caller's audio reaches a ``VoiceSession`` and its reply gets back."""

from web.transports.audio_track import PacedAudioTrack
from web.transports.webrtc import WebRTCTransport

__all__ = ["PacedAudioTrack", "WebRTCTransport"]
