"""Transports: how a caller's audio reaches a ``VoiceSession`` and its reply gets back — one
module per transport (``webrtc``, ``twilio``, ``audiosocket``), the life their calls share in
``call``, and what a websocket transport declares to the server in ``entry``.

This package imports no transport: ``admission`` imports ``call``, and each transport imports
``admission``, so a transport imported first would find ``admission`` half-made.
"""

from cadence.web.transports.audio_track import PacedAudioTrack

__all__ = ["PacedAudioTrack"]
