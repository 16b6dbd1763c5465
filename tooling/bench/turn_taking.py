"""``cadence bench-turns``: turn-taking on real speech — talk-overs, false interruptions, the
voice-to-voice of complete turns, and the trade-off between them.

The clips are ``cadence make-paused-clips``'s (``tooling/bench/paused_clips.py``): each
utterance complete, and the same with a silence of 0.3–1.5 s inserted mid-sentence. Live,
each is played in real time as one turn through the bench's own machinery (``run_bench``,
``run_turn``, ``TwilioTurnRunner``) at the configuration's settings; the traces say what
became of every turn, and of every clip (``pipeline/tracing/outcomes.py``: ``turn_outcome``,
``utterance_outcome``). This module holds the live half; the offline half (the trade-off
curve and the end-of-turn models' accuracy, from whisper's transcripts) is
``turn_taking_offline.py``, the report ``turn_taking_report.py``.

Figures (``turn_taking.json``, ``turn_taking.md``, ``tradeoff.png``; the budget report of the
same traces beside them):

* per transport, **complete clips**: voice-to-voice (true end of speech → first reply sound
  heard) p50/p90 of the turns answered after the end, and every turn's outcome counted;
* per transport, **paused clips**: by pause length, the share of clips talked over (a reply
  heard before the true end of speech), of them how many were heard in or after the inserted
  pause, and the early commits withdrawn unheard; the target bucket (0.5–1 s) pooled;
* **false interruptions** (``tooling/bench/interruptions.py``): per sound played while a reply
  is heard, whether the reply was cut or resumed;
* the **trade-off curve** (fixed wait, adaptive wait) and the smallest wait under 5 %
  talk-overs; the **text model's accuracy** on the clips' reference transcripts (complete)
  and their prefixes at every mid-sentence word boundary (incomplete), and on whisper's
  transcripts of the complete clips and of the paused prefixes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from cadence.core.stats import percentiles
from cadence.pipeline.tracing import (
    ANSWERED_IN_TIME,
    AnchorEvent,
    TurnOutcome,
    TurnTrace,
    turn_outcome,
    utterance_outcome,
)
from cadence.pipeline.tracing.outcomes import heard_at_ms
from cadence.tooling.bench.manifest import ManifestClip, read_manifest
from cadence.tooling.bench.paused_clips import PAUSES_S
from cadence.tooling.bench.tradeoff import (
    TARGET_BUCKET_S,
)
from cadence.voice.audio import PCM16
from cadence.voice.audio.speech_bounds import speech_bounds_ms
from cadence.voice.audio.wavfile import read_audio

SCHEMA = "cadence.turn_taking/1"
JSON_FILE = "turn_taking.json"
MARKDOWN_FILE = "turn_taking.md"
PLOT_FILE = "tradeoff.png"
SPEECH_RATE = 16000
TELEPHONE_RATE = 8000

Kind = Literal["complete", "paused"]


@dataclass(frozen=True)
class TurnClip:
    """One line of a paused-clips manifest."""

    clip: ManifestClip
    source_id: str
    kind: Kind
    pause_at_s: float | None = None
    pause_s: float | None = None
    prefix_text: str | None = None
    silence_s: float | None = None
    agent: str | None = None
    """What the agent said before the caller's words (``make-turn-clips``' clips)."""

    @property
    def id(self) -> str:
        return self.clip.id


def read_turn_manifest(path: Path) -> list[TurnClip]:
    """The clips of a ``make-paused-clips`` manifest; a plain bench manifest reads as complete
    clips only."""
    clips = read_manifest(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    result = []
    for clip, row in zip(clips, rows, strict=True):
        kind = row.get("kind", "complete")
        if kind not in ("complete", "paused"):
            raise ValueError(f"{path}: clip {clip.id!r} has kind {kind!r}")
        paused = kind == "paused"
        if paused and (row.get("pause_at_s") is None or row.get("pause_s") is None):
            raise ValueError(f"{path}: paused clip {clip.id!r} lacks pause_at_s or pause_s")
        result.append(
            TurnClip(
                clip,
                str(row.get("source_id", clip.id)),
                kind,
                float(row["pause_at_s"]) if paused else None,
                float(row["pause_s"]) if paused else None,
                row.get("prefix_text"),
                float(row["silence_s"]) if row.get("silence_s") is not None else None,
                row.get("agent"),
            )
        )
    return result


# ---------------------------------------------------------------------------------- live


def transport_of(variant: str) -> str:
    """The bench names the in-process run ``full`` and every other by its transport."""
    return "direct" if variant == "full" else variant


def played_audio(clip: ManifestClip, transport: str) -> tuple[PCM16, int]:
    """The audio a transport plays of ``clip``, at its rate (as the bench's runners read it)."""
    if transport == "direct":
        return read_audio(clip.path, SPEECH_RATE), SPEECH_RATE
    return read_audio(clip.telephone_path or clip.path, TELEPHONE_RATE), TELEPHONE_RATE


def _voice_to_voice(turns: Iterable[TurnTrace]) -> list[float]:
    values = []
    for turn in turns:
        heard, end = heard_at_ms(turn), turn.events.get(AnchorEvent.USER_SPEECH_END)
        if turn_outcome(turn) in ANSWERED_IN_TIME and heard is not None and end is not None:
            values.append(heard - end)
    return values


@dataclass
class PausedClipResult:
    clip_id: str
    source_id: str
    pause_s: float
    outcome: str
    heard_at_s: float | None
    """When a talked-over reply was first heard, in seconds of the clip (``None`` if none)."""
    into_pause: bool
    """Talked over at or after the inserted pause (not at a pause of the clip's own)."""
    withdrawn: int
    """Early commits taken back (unheard, or yielded after a moment)."""
    yielded: int = 0
    """Of them, replies heard for a moment that yielded when the caller went on: still
    talked over (the caller heard them), counted apart so the report says how briefly."""


def _heard_in_clip_s(turns: Sequence[TurnTrace], speech_end_in_clip_ms: float) -> float | None:
    """When the first talked-over reply was heard, in seconds from the clip's start."""
    for turn in turns:
        if turn_outcome(turn) is TurnOutcome.TALKED_OVER:
            heard, end = heard_at_ms(turn), turn.events.get(AnchorEvent.USER_SPEECH_END)
            if heard is not None and end is not None:
                return (heard - (end - speech_end_in_clip_ms)) / 1000.0
    return None


def live_figures(
    traces: Sequence[TurnTrace],
    clips: Sequence[TurnClip],
    *,
    speech_end_ms: Callable[[TurnClip, str], float] | None = None,
) -> dict[str, Any]:
    """Per transport, the complete and the paused clips' figures (the module's docstring).
    ``speech_end_ms(clip, transport)`` is where speech ends in the clip as that transport
    played it (read from the audio by default)."""
    end_of = speech_end_ms or _speech_end_ms
    by_id = {c.id: c for c in clips}
    grouped: dict[str, dict[str, list[TurnTrace]]] = {}
    for trace in traces:
        clip_id = trace.annotations.get("clip_id")
        if not isinstance(clip_id, str) or clip_id not in by_id:
            continue
        transport = transport_of(str(trace.annotations.get("variant", "full")))
        grouped.setdefault(transport, {}).setdefault(clip_id, []).append(trace)
    result: dict[str, Any] = {}
    for transport, per_clip in grouped.items():
        complete = {k: v for k, v in per_clip.items() if by_id[k].kind == "complete"}
        paused = [
            _paused_result(by_id[k], v, end_of(by_id[k], transport))
            for k, v in per_clip.items()
            if by_id[k].kind == "paused"
        ]
        result[transport] = {
            "complete": _complete_figures(complete),
            "paused": paused_figures(paused),
            "paused_clips": [asdict(p) for p in paused],
        }
    return result


def _speech_end_ms(clip: TurnClip, transport: str) -> float:
    audio, rate = played_audio(clip.clip, transport)
    return speech_bounds_ms(audio, rate)[1]


def _complete_figures(per_clip: Mapping[str, Sequence[TurnTrace]]) -> dict[str, Any]:
    turns = [t for ts in per_clip.values() for t in ts]
    outcomes = Counter(str(turn_outcome(t)) for t in turns)
    clip_outcomes = Counter(str(utterance_outcome(ts)) for ts in per_clip.values())
    v2v = _voice_to_voice(turns)
    return {
        "clips": len(per_clip),
        "turns": len(turns),
        "outcomes": {str(o): outcomes.get(str(o), 0) for o in TurnOutcome},
        "clip_outcomes": dict(sorted(clip_outcomes.items())),
        "yielded": _yielded(turns),
        "voice_to_voice_ms": {"count": len(v2v)} | percentiles(v2v, (50, 90)),
    }


def _paused_result(clip: TurnClip, turns: Sequence[TurnTrace], end_ms: float) -> PausedClipResult:
    assert clip.pause_s is not None
    assert clip.pause_at_s is not None
    heard = _heard_in_clip_s(turns, end_ms)
    return PausedClipResult(
        clip_id=clip.id,
        source_id=clip.source_id,
        pause_s=clip.pause_s,
        outcome=str(utterance_outcome(turns)),
        heard_at_s=None if heard is None else round(heard, 3),
        into_pause=heard is not None and heard >= clip.pause_at_s - 0.02,
        withdrawn=sum(t.annotations.get("withdrawn") is True for t in turns),
        yielded=_yielded(turns),
    )


def _yielded(turns: Sequence[TurnTrace]) -> int:
    """Replies that yielded after being heard for a moment (``yield_within_ms``)."""
    return sum(t.annotations.get("yielded_after_ms") is not None for t in turns)


def _bucket(results: Sequence[PausedClipResult]) -> dict[str, Any]:
    talked = sum(r.outcome == "talked_over" for r in results)
    return {
        "clips": len(results),
        "talked_over": talked,
        "talk_over_rate": talked / len(results) if results else None,
        "into_pause": sum(r.into_pause for r in results),
        "withdrawn": sum(r.withdrawn for r in results),
        "yielded": sum(r.yielded for r in results),
        "answered": sum(r.outcome == "answered" for r in results),
        "unanswered": sum(r.outcome == "unanswered" for r in results),
        "failed": sum(r.outcome == "failed" for r in results),
    }


def paused_figures(results: Sequence[PausedClipResult]) -> dict[str, Any]:
    lengths = sorted({r.pause_s for r in results} | set(PAUSES_S))
    low, high = TARGET_BUCKET_S
    return {
        "by_pause": [
            {"pause_s": length} | _bucket([r for r in results if r.pause_s == length])
            for length in lengths
        ],
        "target_bucket": {"pause_s": [low, high]}
        | _bucket([r for r in results if low <= r.pause_s <= high]),
        "all": _bucket(results),
    }
