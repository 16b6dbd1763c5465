"""False interruptions: what a sound from the caller does to a reply being heard.

One session per sound, in process at 16 kHz: the caller says a complete utterance (the
*question* clip), waits until the reply is heard, and ``AFTER_HEARD_MS`` later plays the
sound; then listens for ``LISTEN_MS``. The sounds:

* **backchannels** — real short words cut out of the clips by their word timestamps
  (``words.jsonl``), and "yeah", "okay", "uh-huh" said by the configured Piper voice (marked
  ``synthesized``). The clips are read sentences: the short words they hold are "so" and "one",
  which are not what a listener says — they count as words;
* **noise** — a 150 ms burst of line noise (the "cough") and a 10 ms click;
* **words** — a whole other clip: a real interruption.

Per sound the result is ``cut`` (the trace has ``interrupted``, or the transport was told to
clear), ``resumed`` (not cut, and the same reply was heard again after the sound), ``paused``
(neither: the reply stopped and never came back) or ``over_before`` (the reply had finished
before the sound, so the case says nothing). A backchannel or a noise should resume; words
should cut. The history's agent turn says what the caller is taken to have heard.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from cadence.pipeline.config import CadenceConfig
from cadence.pipeline.session import SAMPLE_RATE
from cadence.pipeline.tracing import AnchorEvent
from cadence.tooling.bench.manifest import ManifestClip
from cadence.tooling.bench.pause_points import Word, normalised
from cadence.tooling.bench.turn_bench import answered_call
from cadence.tooling.emulators.hearing import PlayedAudio, audible_at_ms, first_heard_after
from cadence.voice.audio import PCM16, resample
from cadence.voice.audio.speech_bounds import speech_bounds_ms
from cadence.voice.audio.wavfile import read_audio

AFTER_HEARD_MS = 800.0
"""How long after the reply is first heard the caller makes the sound."""
LISTEN_MS = 3000.0
"""How long the caller listens after the sound."""
STEP_MS = 20.0
SHORT_WORDS = ("yeah", "yes", "okay", "ok", "uh-huh", "mm-hmm", "right", "oh", "so", "no", "one")
"""Real short words to cut out of the clips, in order of preference."""
LISTENER_WORDS = frozenset({"yeah", "yes", "okay", "ok", "uh-huh", "mm-hmm", "right", "oh"})
"""Those of them a listener says without taking the turn: these should leave the reply going;
any other short word ("so", "no", "one") says something, and should cut it."""
REAL_SHORT_WORDS = 3
SYNTHESIZED = ("Yeah.", "Okay.", "Uh-huh.")
NOISE_DBFS = -20.0

Kind = Literal["backchannel", "noise", "words"]


@dataclass(frozen=True)
class Sound:
    name: str
    kind: Kind
    pcm: PCM16
    """16 kHz."""
    source: str

    @property
    def expected(self) -> str:
        return "cut" if self.kind == "words" else "resumed"


def _faded(pcm: PCM16, fade_ms: float = 10.0) -> PCM16:
    samples = pcm.astype(np.float64)
    n = min(len(samples) // 2, int(SAMPLE_RATE * fade_ms / 1000))
    if n:
        ramp = np.linspace(0.0, 1.0, n)
        samples[:n] *= ramp
        samples[-n:] *= ramp[::-1]
    return np.rint(samples).astype(np.int16)


def real_short_words(
    clips: Sequence[ManifestClip], words: Mapping[str, Sequence[Word]], count: int
) -> list[Sound]:
    """Up to ``count`` distinct short words (``SHORT_WORDS``) cut out of ``clips`` at their
    word timestamps (with 30 ms either side), in order of preference, then of the clips."""
    found: list[Sound] = []
    seen: set[str] = set()
    for wanted in SHORT_WORDS:
        for clip in clips:
            for word in words.get(clip.id, ()):
                if normalised(word.text) != wanted.replace("-", "") or wanted in seen:
                    continue
                audio = read_audio(clip.path, SAMPLE_RATE)
                start = max(0, round((word.start_s - 0.03) * SAMPLE_RATE))
                stop = min(len(audio), round((word.end_s + 0.03) * SAMPLE_RATE))
                found.append(
                    Sound(
                        f'"{wanted}"',
                        "backchannel" if wanted in LISTENER_WORDS else "words",
                        _faded(audio[start:stop]),
                        f"{clip.id} {word.start_s:.2f}–{word.end_s:.2f} s",
                    )
                )
                seen.add(wanted)
                if len(found) == count:
                    return found
    return found


def synthesized_backchannels(synthesize: Callable[[str], tuple[PCM16, int]]) -> list[Sound]:
    """``SYNTHESIZED`` in the configured voice, trimmed to their speech."""
    sounds = []
    for text in SYNTHESIZED:
        pcm, rate = synthesize(text)
        audio = resample(pcm, rate, SAMPLE_RATE)
        start, end = speech_bounds_ms(audio, SAMPLE_RATE)
        cut = audio[int(start * 16) : int(end * 16)]
        name = f'"{normalised(text)}" (synthesized)'
        sounds.append(Sound(name, "backchannel", _faded(cut), "Piper, the configured voice"))
    return sounds


def noise_sounds(seed: int = 17) -> list[Sound]:
    """A 150 ms burst of line noise at ``NOISE_DBFS`` (the "cough") and a 10 ms click."""
    rng = np.random.default_rng(seed)
    level = 32768 * 10 ** (NOISE_DBFS / 20)
    burst = rng.normal(0.0, level, int(0.150 * SAMPLE_RATE))
    click = np.zeros(int(0.010 * SAMPLE_RATE))
    click[:16] = level * 3 * np.sign(rng.normal(size=16))
    return [
        Sound(
            "line noise 150 ms",
            "noise",
            _faded(np.clip(burst, -32768, 32767).astype(np.int16)),
            f"white noise, {NOISE_DBFS:.0f} dBFS RMS",
        ),
        Sound(
            "click 10 ms",
            "noise",
            np.clip(click, -32768, 32767).astype(np.int16),
            "16 samples of ±3× that level",
        ),
    ]


def words_sound(clip: ManifestClip) -> Sound:
    return Sound(f'"{clip.text}"', "words", read_audio(clip.path, SAMPLE_RATE), clip.id)


@dataclass
class InterruptionResult:
    name: str
    kind: str
    source: str
    sound_ms: float
    expected: str
    result: str
    """``cut``, ``resumed``, ``paused`` or ``over_before`` (the module's docstring)."""
    correct: bool | None
    """Whether the result is the expected one (``None`` for ``over_before``)."""
    reply_ms_before: float
    """Reply audio heard before the sound."""
    reply_ms_after: float
    """Audible reply audio of the same reply after the sound."""
    heard_text: str | None
    """The agent's turn in the history at the end: what it is taken to have said."""


async def run_interruption(
    question: ManifestClip,
    sound: Sound,
    config: CadenceConfig,
    session_id: str,
    *,
    after_heard_ms: float = AFTER_HEARD_MS,
    listen_ms: float = LISTEN_MS,
) -> InterruptionResult:
    """Play ``question``, then ``sound`` while its reply is heard (the module's docstring)."""
    audio = read_audio(question.path, SAMPLE_RATE)
    async with answered_call(config, audio, session_id, tail_ms=0.0, poll_ms=STEP_MS) as call:
        caller, output = call.caller, call.output
        first = first_heard_after(output.heard_at_ms(), call.true_end_ms)
        if first is not None:
            while caller.position_ms < first + after_heard_ms:
                await caller.pause(STEP_MS)
        sound_start = caller.position_ms
        await caller.say(sound.pcm)
        sound_end = caller.position_ms
        await caller.pause(listen_ms)
        history = call.session.history
    traces = call.traces
    replies = [s.frame.reply_index for s in output.sent if s.at_ms <= sound_start]
    reply = replies[-1] if replies else None
    mine = [s for s in output.sent if s.frame.reply_index == reply]
    before = audible_at_ms(
        PlayedAudio(s.at_ms, s.frame.pcm, s.frame.sample_rate) for s in mine
        if s.at_ms < sound_start
    )  # fmt: skip
    after = audible_at_ms(
        PlayedAudio(s.at_ms, s.frame.pcm, s.frame.sample_rate) for s in mine
        if s.at_ms >= sound_end
    )  # fmt: skip
    cut = any(
        t.events.get(AnchorEvent.INTERRUPTED, -1.0) >= sound_start for t in traces.turns
    ) or any(at >= sound_start for at in output.clears)
    sent_after_start = any(s.at_ms >= sound_start for s in mine)
    if cut:
        result = "cut"
    elif after:
        result = "resumed"
    elif not sent_after_start:
        result = "over_before"
    else:
        result = "paused"
    agent = [t.text for t in history if t.speaker == "agent"]
    window = 20.0  # each audible onset stands for one 20 ms window (hearing.WINDOW_MS)
    return InterruptionResult(
        name=sound.name,
        kind=sound.kind,
        source=sound.source,
        sound_ms=1000.0 * len(sound.pcm) / SAMPLE_RATE,
        expected=sound.expected,
        result=result,
        correct=None if result == "over_before" else result == sound.expected,
        reply_ms_before=window * len(before),
        reply_ms_after=window * len(after),
        heard_text=agent[0] if agent else None,
    )


async def run_interruptions(
    question: ManifestClip, sounds: Sequence[Sound], config: CadenceConfig
) -> list[dict[str, Any]]:
    """Every sound over the reply to ``question``, one session each, one after the other."""
    results = []
    for number, sound in enumerate(sounds):
        result = await run_interruption(question, sound, config, f"interrupt-{number}")
        results.append(asdict(result))
    return results


def summarize(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """False interruptions (a backchannel or a noise that cut the reply) and missed ones
    (words that did not), over the cases that say something."""
    judged = [r for r in results if r["correct"] is not None]
    soft = [r for r in judged if r["kind"] != "words"]
    words = [r for r in judged if r["kind"] == "words"]
    return {
        "cases": len(results),
        "judged": len(judged),
        "false_interruptions": sum(r["result"] == "cut" for r in soft),
        "soft_sounds": len(soft),
        "resumed": sum(r["result"] == "resumed" for r in soft),
        "words_cut": sum(r["result"] == "cut" for r in words),
        "words": len(words),
    }
