"""The text end-of-turn model's features: a transcript (and the agent's turn before it) → hashed
feature indices with signs.

One function serves training (``tooling/training/end_of_turn_fit.py``) and scoring
(``text_model.py``), so the two can never disagree on what a feature is. Everything is read off
the *normalised* words (``normalize_transcript``: lower case, no punctuation, numbers as words),
because Whisper's punctuation and casing are unreliable exactly where it matters — a partial
transcript in a mid-sentence pause often ends in a period — and because "5 5", "five five" and
"$20" / "twenty dollars" must look the same to the model.

Whether an utterance is finished is decided mostly by how it *ends*, so most features are
anchored at the end: the last one to four words, the last word's character trigrams (for names
and words Whisper got wrong), crossed with the length and the first word. The agent's previous
turn is context: "two" is a whole answer to "How many people?" and the start of one to "Where
would you like to go?". The agent's text is Cadence's own, so its question mark is trusted.

Features are hashed (CRC-32, stable across processes, unlike ``hash()``) into a fixed-size
vector with a sign bit, so the weights file is one array and unseen words cost nothing.
"""

from __future__ import annotations

import functools
import re
import zlib

from cadence.voice.stt.normalize import normalize_transcript

FEATURE_VERSION = 1
"""Bumped whenever what a feature means changes; the weights file records the version it was
trained with, and loading refuses a mismatch instead of scoring garbage."""

_LENGTH_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10, 13, 17, 22)
_SENTENCE_END = re.compile(r"[.?!]+")
_QUESTION = re.compile(r"[^.?!]+\?")


def words_of(text: str) -> list[str]:
    """The normalised words of a transcript, as every feature reads them."""
    return normalize_transcript(text).split()


def length_bucket(n: int) -> str:
    for i, bound in enumerate(_LENGTH_BUCKETS):
        if n <= bound:
            return str(i)
    return str(len(_LENGTH_BUCKETS))


def feature_names(words: list[str], agent_text: str | None) -> list[str]:
    """The named features of an utterance already split into normalised ``words``."""
    n = len(words)
    if n == 0:
        return ["empty"]
    last = words[-1]
    bucket = length_bucket(n)
    names = [
        f"L1={last}",
        f"L2={' '.join(words[-2:])}",
        f"L3={' '.join(words[-3:])}",
        f"L4={' '.join(words[-4:])}",
        f"P1={words[-2] if n > 1 else '^'}",
        f"P2={words[-3] if n > 2 else '^'}",
        f"F1={words[0]}",
        f"F2={' '.join(words[:2])}",
        f"N={bucket}",
        f"NL1={bucket}|{last}",
        f"NL2={bucket}|{' '.join(words[-2:])}",
        f"FL1={words[0]}|{last}",
    ]
    marked = f"<{last}>"
    names += [f"C3={marked[i : i + 3]}" for i in range(len(marked) - 2)]
    names += [f"W={word}" for word in words]
    names += _context_names(words, bucket, agent_text)
    return names


def _context_names(words: list[str], bucket: str, agent_text: str | None) -> list[str]:
    if agent_text is None or not agent_text.strip():
        return ["A=none", f"AN=none|{bucket}", f"AL1=none|{words[-1]}"]
    q, head_words, agent_last = _agent_summary(agent_text)
    head = " ".join(head_words)
    last = words[-1]
    return [
        f"AQ={q}",
        f"AQN={q}|{bucket}",
        f"AQL1={q}|{last}",
        f"AQL2={q}|{' '.join(words[-2:])}",
        f"AH={head}",
        f"AH1={head_words[0]}",
        f"AHN={head}|{bucket}",
        f"AHL1={head}|{last}",
        f"AHF1={head}|{words[0]}",
        f"AT1={agent_last}",
        f"AT1L1={agent_last}|{last}",
    ]


@functools.lru_cache(maxsize=1024)
def _agent_summary(agent_text: str) -> tuple[str, tuple[str, ...], str]:
    """Whether the agent's turn ended in a question, the first two words of the question the
    caller is answering (its last one, else its last sentence), and its last word. Cached:
    every partial transcript of one caller turn follows the same agent turn."""
    asked = agent_text.rstrip().endswith("?")
    questions = _QUESTION.findall(agent_text)
    sentences = [s for s in _SENTENCE_END.split(agent_text) if s.strip()]
    question = questions[-1] if questions else (sentences[-1] if sentences else agent_text)
    head_words = tuple(words_of(question)[:2]) or ("^",)
    agent_words = words_of(agent_text) or ["^"]
    return ("q" if asked else "s"), head_words, agent_words[-1]


def hashed(names: list[str], dim: int) -> tuple[list[int], list[float]]:
    """Feature names → indices into a ``dim``-sized weight vector (a power of two) and ±1
    signs; the sign halves the bias that colliding features put on each other."""
    mask = dim - 1
    indices: list[int] = []
    signs: list[float] = []
    for name in names:
        h = zlib.crc32(name.encode("utf-8"))
        indices.append(h & mask)
        signs.append(1.0 if h >> 31 else -1.0)
    return indices, signs


def featurize(text: str, agent_text: str | None, dim: int) -> tuple[list[int], list[float]]:
    """A raw transcript and the agent's previous turn → hashed features."""
    return hashed(feature_names(words_of(text), agent_text), dim)
