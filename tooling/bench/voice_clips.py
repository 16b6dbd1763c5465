"""``cadence make-turn-clips``: turn-taking clips in the project's own voices, in the styles
callers speak in — requests, two sentences in one turn, numbers read in groups, names spelled
letter by letter, addresses, hesitations ("um"), clauses after commas and short commands —
each with the agent's words it answers and the pauses a caller makes.

Why synthesized: the read-speech clips (``tests/data/speech``) are 34 sentences read aloud, and
their speakers rarely pause mid-turn; a caller spelling a name or reading a card number pauses
at every group. The words come from a dialogue corpus (a user turn and the agent turn before
it, the agent's phone numbers and addresses, the names in it), so the text is what callers
write; the voices are the TTS voices the project ships, each chunk synthesized alone and the
chunks joined by the pause, filled with faint noise so that the VAD hears silence, not a gap
in the signal. The recipe is seeded: the same corpus, seed and voices give the same clips.

Every clip is a ``complete`` clip of the turn-taking manifest: its pauses are found by the
engine's VAD, as the speaker's own pauses of a recording are (``offline_cases``), and its end
is the end of the turn. ``pauses_s`` records the pauses put in, ``style`` and ``agent`` the
rest.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cadence.tooling.bench.pause_points import UNFINISHED, ends_sentence, normalised
from cadence.voice.audio import PCM16, resample
from cadence.voice.audio.wavfile import write_wav

SPEECH_RATE = 16000
PAUSES_S = (0.3, 0.5, 0.7, 1.0, 1.5)
"""The pause lengths put between chunks, as in the paused read-speech clips."""
LETTER_PAUSES_S = (0.15, 0.25, 0.4)
"""Between spelled letters and digits of a group: shorter than between groups."""
STYLES = (
    "request",
    "two_sentences",
    "numbers",
    "spelled",
    "address",
    "hesitation",
    "clauses",
    "command",
)
NOISE_DBFS = -62.0
"""The fill of every pause and of the clip's head and tail: a quiet line, below the VAD."""
HEAD_S, TAIL_S = 0.4, 1.6

_PHONE = re.compile(r"\b(\d{3})-(\d{3})-(\d{4})\b")
_STREET = r"(?:Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Drive|Way|Lane|Row|Place)"
_ADDRESS = re.compile(rf"\b(\d{{2,5}}) ((?:[A-Z][a-z]+ ){{1,3}}{_STREET})\b")
_NAME = re.compile(r"\b(?:at|called|named|with) ([A-Z][a-z]{3,8})\b")


@dataclass(frozen=True)
class Plan:
    """One clip before synthesis: the chunks said, and the pause after each but the last."""

    style: str
    agent: str | None
    chunks: tuple[str, ...]
    pauses_s: tuple[float, ...]

    @property
    def text(self) -> str:
        return " ".join(self.chunks)


def _mid_boundary(words: Sequence[str], rng: random.Random, *, unfinished: bool) -> int | None:
    """A cut inside ``words`` (not after the first or before the last, not at a sentence's
    end): after a word that leaves the sentence unfinished if ``unfinished``, else anywhere."""
    cuts = [
        k
        for k in range(2, len(words) - 1)
        if not ends_sentence(words[k - 1])
        and (not unfinished or normalised(words[k - 1]) in UNFINISHED)
    ]
    return rng.choice(cuts) if cuts else None


@dataclass(frozen=True)
class CallerTurn:
    """A user turn of a dialogue corpus, and the agent's turn right before it (if any)."""

    text: str
    agent: str | None


def plan_for(style: str, turn: CallerTurn, rng: random.Random) -> Plan | None:
    """The clip of ``style`` this corpus turn gives, or ``None`` if it gives none."""
    words, agent = turn.text.split(), turn.agent
    pause = rng.choice(PAUSES_S)
    match style:
        case "request" | "hesitation" if len(words) >= 6:
            cut = _mid_boundary(words, rng, unfinished=style == "request" and rng.random() < 0.5)
            if cut is None:
                return None
            head = " ".join(words[:cut]) + (", um," if style == "hesitation" else "")
            return Plan(style, agent, (head, " ".join(words[cut:])), (pause,))
        case "two_sentences":
            ends = [k for k in range(1, len(words)) if ends_sentence(words[k - 1])]
            if not ends or len(words) < 5:
                return None
            cut = rng.choice(ends)
            return Plan(style, agent, (" ".join(words[:cut]), " ".join(words[cut:])), (pause,))
        case "clauses" if ", " in turn.text and len(words) >= 6:
            parts = [p.strip() for p in turn.text.split(",") if p.strip()]
            if len(parts) < 2:
                return None
            chunks = (*(p + "," for p in parts[:-1]), parts[-1])
            return Plan(style, agent, chunks, tuple(rng.choice(PAUSES_S) for _ in parts[:-1]))
        case "command" if 1 <= len(words) <= 4:
            return Plan(style, agent, (turn.text,), ())
    return None


def _digits(group: str) -> str:
    return " ".join(group)


def agent_plans(turns: Sequence[CallerTurn], rng: random.Random) -> Iterator[Plan]:
    """Clips whose words the agent's turns supply: a phone number read back in groups, an
    address, a name spelled — each said by the caller, answering what the agent asked."""
    for turn in turns:
        agent = turn.agent or ""
        if match := _PHONE.search(agent):
            groups = [_digits(g) for g in match.groups()]
            digits = (f"My number is {groups[0]},", f"{groups[1]},", groups[2])
            between = (rng.choice(PAUSES_S), rng.choice(PAUSES_S))
            yield Plan("numbers", "What is the best number to reach you?", digits, between)
        if match := _ADDRESS.search(agent):
            number, street = match.groups()
            address = (f"It's at {_digits(number)}", f"{street}.")
            yield Plan("address", "What is the address?", address, (rng.choice(PAUSES_S),))
        if match := _NAME.search(agent):
            name = match.group(1)
            letters = [f"{letter}," for letter in name.upper()]
            letters[-1] = letters[-1].rstrip(",")
            gaps = (rng.choice(PAUSES_S), *(rng.choice(LETTER_PAUSES_S) for _ in letters[1:]))
            spelled = (f"The name is {name}, that's", *letters)
            yield Plan("spelled", "Could you spell that for me?", spelled, gaps)


def plans(corpus: Sequence[CallerTurn], per_style: int, seed: int) -> list[Plan]:
    """``per_style`` clips of each style from the turns of a corpus, drawn with ``seed``."""
    rng = random.Random(seed)
    turns = list(corpus)
    rng.shuffle(turns)
    chosen: dict[str, list[Plan]] = {style: [] for style in STYLES}
    for plan in agent_plans(turns, rng):
        if len(chosen[plan.style]) < per_style:
            chosen[plan.style].append(plan)
    for turn in turns:
        for style in STYLES:
            if len(chosen[style]) < per_style and (made := plan_for(style, turn, rng)):
                chosen[style].append(made)
                break
    return [plan for style in STYLES for plan in chosen[style]]


def _quiet(seconds: float, rng: np.random.Generator) -> PCM16:
    scale = 32768.0 * 10 ** (NOISE_DBFS / 20)
    noise = rng.normal(0.0, scale, round(seconds * SPEECH_RATE))
    out: PCM16 = np.clip(noise, -32768, 32767).astype(np.int16)
    return out


def _trimmed(pcm: PCM16) -> PCM16:
    """``pcm`` without the voice's own silence before and after the words."""
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > 32768.0 * 10 ** (-45 / 20))
    return pcm[int(loud[0]) : int(loud[-1]) + 1] if len(loud) else pcm


def render(plan: Plan, speak: Callable[[str], PCM16], seed: int) -> PCM16:
    """The clip of ``plan``: each chunk spoken by ``speak`` (16 kHz), the pauses between."""
    rng = np.random.default_rng(seed)
    parts = [_quiet(HEAD_S, rng)]
    for i, chunk in enumerate(plan.chunks):
        parts.append(_trimmed(speak(chunk)))
        if i < len(plan.pauses_s):
            parts.append(_quiet(plan.pauses_s[i], rng))
    parts.append(_quiet(TAIL_S, rng))
    return np.concatenate(parts)


def make_turn_clips(
    corpus: Sequence[CallerTurn],
    name: str,
    out: Path,
    voices: dict[str, Callable[[str], tuple[PCM16, int]]],
    *,
    per_style: int,
    seed: int = 0,
) -> int:
    """Write each plan of ``corpus`` (named ``name``) in each voice under ``out`` (16 kHz WAV)
    and their manifest; returns the number of clips."""
    (out / "wav16k").mkdir(parents=True, exist_ok=True)
    rows = []
    for v, (voice, synthesize) in enumerate(voices.items()):

        def speak(text: str, synthesize: Callable[[str], tuple[PCM16, int]] = synthesize) -> PCM16:
            pcm, rate = synthesize(text)
            return pcm if rate == SPEECH_RATE else resample(pcm, rate, SPEECH_RATE)

        for n, plan in enumerate(plans(corpus, per_style, seed)):
            clip_id = f"{name}-{plan.style}-{n:03d}-{voice}"
            path = out / "wav16k" / f"{clip_id}.wav"
            write_wav(path, render(plan, speak, seed * 1000 + 100 * v + n), SPEECH_RATE)
            rows.append(
                {
                    "id": clip_id,
                    "file": str(path.relative_to(out)),
                    "text": plan.text,
                    "kind": "complete",
                    "style": plan.style,
                    "voice": voice,
                    "agent": plan.agent,
                    "pauses_s": list(plan.pauses_s),
                    "source": f"{name} (seed {seed})",
                }
            )
    manifest = out / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return len(rows)
