"""``Endpointer``: turns per-frame speech decisions into turn events, with hysteresis.

Every event is back-dated to the audio it describes, not to when it was decided:
``speech_start`` is the start of the first voiced frame of the onset run, ``pause_start`` the
end of the last voiced frame, ``endpoint`` carries that same end as ``speech_end_ms``. Pure
logic on frame times, so it is tested frame by frame without audio.

A VAD keeps saying "speech" through the quiet decay after the last word (webrtcvad for about
100 ms), and every millisecond of that delays the endpoint. With ``tail_trim_db`` set, the
end of speech is placed at the last voiced frame within that many dB of the utterance's
loudest frame: the state changes still follow the VAD (a quiet syllable does not start a
pause), but once a pause starts, it is dated from where the voice fell away.

    SILENT ──onset run──▶ SPEAKING ──pause run──▶ PAUSED ──endpoint silence──▶ SILENT
                              ▲                       │
                              └──── onset run ────────┘ (speech_resumed)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum


class VADEventKind(Enum):
    SPEECH_START = "speech_start"
    PAUSE_START = "pause_start"
    SPEECH_RESUMED = "speech_resumed"
    ENDPOINT = "endpoint"


@dataclass(frozen=True)
class VADEvent:
    kind: VADEventKind
    at_ms: float
    """When it happened in the audio (back-dated); for ``ENDPOINT``, the end of the frame that
    completed the silence."""
    speech_end_ms: float | None = None
    """``ENDPOINT`` only: end of the last voiced frame of the utterance."""
    forced: bool = False
    """``ENDPOINT`` only: cut by the maximum utterance length, not by silence."""


class _State(Enum):
    SILENT = "silent"
    SPEAKING = "speaking"
    PAUSED = "paused"


class Endpointer:
    def __init__(
        self,
        *,
        frame_ms: float,
        onset_ms: float,
        pause_ms: float,
        endpoint_silence_ms: float,
        max_utterance_ms: float,
        tail_trim_db: float | None = None,
    ) -> None:
        if pause_ms > endpoint_silence_ms:
            raise ValueError(
                f"pause_ms ({pause_ms}) must not exceed endpoint_silence_ms ({endpoint_silence_ms})"
            )
        self.frame_ms = frame_ms
        self._onset_frames = max(1, math.ceil(onset_ms / frame_ms))
        self._pause_frames = max(1, math.ceil(pause_ms / frame_ms))
        self._endpoint_silence_ms = endpoint_silence_ms
        self._max_utterance_ms = max_utterance_ms
        self._tail_trim_db = tail_trim_db
        self._peak_db = -math.inf
        self._run_peak_db = -math.inf
        self._state = _State.SILENT
        self._voiced_run = 0
        self._voiced_run_start = 0.0
        self._unvoiced_run = 0
        self._utterance_start = 0.0
        self._last_voiced_end = 0.0
        self._last_loud_end = 0.0

    @property
    def in_utterance(self) -> bool:
        """Between ``speech_start`` and ``endpoint``."""
        return self._state is not _State.SILENT

    def update(self, voiced: bool, frame_start_ms: float, level_db: float = 0.0) -> list[VADEvent]:
        """Feed the decision for the frame starting at ``frame_start_ms`` (and its level, for
        the tail trim); returns the events it completed."""
        frame_end = frame_start_ms + self.frame_ms
        if voiced:
            if self._voiced_run == 0:
                self._voiced_run_start = frame_start_ms
                self._run_peak_db = level_db
            self._voiced_run += 1
            self._run_peak_db = max(self._run_peak_db, level_db)
            if self._state is not _State.SILENT:
                self._peak_db = max(self._peak_db, level_db)
                if self._loud(level_db):
                    self._last_loud_end = frame_end
            self._unvoiced_run = 0
        else:
            self._voiced_run = 0
            self._unvoiced_run += 1

        if self._state is _State.SILENT:
            if self._voiced_run >= self._onset_frames:
                self._state = _State.SPEAKING
                self._utterance_start = self._voiced_run_start
                self._last_voiced_end = frame_end
                self._last_loud_end = frame_end
                self._peak_db = self._run_peak_db
                return [VADEvent(VADEventKind.SPEECH_START, self._voiced_run_start)]
            return []

        events: list[VADEvent] = []
        if self._state is _State.SPEAKING:
            if voiced:
                self._last_voiced_end = frame_end
            elif self._unvoiced_run >= self._pause_frames:
                self._state = _State.PAUSED
                events.append(VADEvent(VADEventKind.PAUSE_START, self._speech_end))
        elif self._voiced_run >= self._onset_frames:  # PAUSED, and speech came back
            self._state = _State.SPEAKING
            self._last_voiced_end = frame_end
            self._last_loud_end = frame_end
            events.append(VADEvent(VADEventKind.SPEECH_RESUMED, self._voiced_run_start))

        if self._state is _State.PAUSED:
            if frame_end - self._speech_end >= self._endpoint_silence_ms:
                events.append(self._endpoint(frame_end, forced=False))
        elif frame_end - self._utterance_start >= self._max_utterance_ms:
            events.append(self._endpoint(frame_end, forced=True))
        return events

    @property
    def _speech_end(self) -> float:
        """End of the utterance so far: the last voiced frame, minus its quiet tail."""
        return self._last_voiced_end if self._tail_trim_db is None else self._last_loud_end

    def _loud(self, level_db: float) -> bool:
        return self._tail_trim_db is None or level_db >= self._peak_db - self._tail_trim_db

    def _endpoint(self, at_ms: float, *, forced: bool) -> VADEvent:
        self._state = _State.SILENT
        self._voiced_run = 0
        end = self._last_voiced_end if forced else self._speech_end
        return VADEvent(VADEventKind.ENDPOINT, at_ms, end, forced)
