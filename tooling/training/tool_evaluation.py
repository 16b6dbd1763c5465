"""What ``cadence eval-lm`` measures of a model's tool use, on the SGD tool corpora.

* **Tool-call exact match**: on agent turns where the corpus's agent called a service, the
  model's reply is a call of the same method with every argument equal (values compared
  case- and space-insensitively); also how often it called at all there, and how often it
  called where the corpus's agent spoke instead.
* **Hallucinated entities**: a spoken reply names an entity — a restaurant, hotel, event,
  address, phone number, airline… (a value of a name-like slot anywhere in the services'
  results) — or a number of two digits or more (a street number, a price, a time) that is
  neither in the conversation so far (what was said and what the tools returned) nor in the
  reply's own results. The reply that offers "1 Hotel Brooklyn Bridge" to a caller who asked
  about a card game counts; one that repeats the result's name does not. An invented name no
  service ever returned ("Biha") is missed, so the share is a lower bound on names; a number
  the caller said in words ("seven thirty") and the reply repeats in digits counts, so on
  numbers it errs the other way. Values that are also common words ("help") are left out.
* **Grounding** (``cadence eval-grounding``): the corpus's own calls grounded in their
  dialogues (a correct call must come out as it was sent), and the caller's dates, times and
  counts as read against what the calls then sent.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cadence.llm.dialogue import ToolCall, Turn
from cadence.llm.result_slots import (
    ReplyFacts,
    SlotFiller,
    latest_rows,
    result_rows,
    returned_values,
    says_date_or_time,
)
from cadence.llm.spoken_values import MAX_COUNT, SGD_TODAY, read_spoken_values, said_values
from cadence.pipeline.tools.sgd_services import SGDCatalogue
from cadence.tooling.training.corpus import read_dialogues

ENTITY_SLOTS = re.compile(
    r"name|address|phone|title|venue|airline|artist|album|stylist|theater|attraction|"
    r"event|dentist|doctor|therapist|car_type|song"
)
"""Slots whose values are entities a reply must not make up."""
MIN_ENTITY_CHARS = 4
"""Shorter values ("A", "Up") are too often ordinary words to count."""
NUMBER = re.compile(r"\d+(?:[:.]\d+)*")
"""A number as written: 3300, 11.08, 12:30, 408-261-5787 (three numbers)."""
COMMON_WORDS = 3000
"""A value made only of this many commonest words of the dialogues is not an entity."""


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w$:.-]+", " ", text.lower()).split())


def entity_lexicon(turns: Iterable[Turn]) -> frozenset[str]:
    """The entity values (normalised) in the results of the tool turns among ``turns``; a
    value made only of the commonest words of what was said ("help", "for you") is left
    out: it names nothing for sure."""
    turns = list(turns)
    spoken = Counter(word for t in turns if t.speaker != "tool" for word in _norm(t.text).split())
    common = {word for word, _ in spoken.most_common(COMMON_WORDS)}
    values: set[str] = set()
    for turn in turns:
        for row in result_rows(turn.text) if turn.speaker == "tool" else ():
            for slot, value in row.items():
                text = _norm(str(value))
                if ENTITY_SLOTS.search(slot) and len(text) >= MIN_ENTITY_CHARS:
                    values.add(text)
    return frozenset(v for v in values if not set(v.split()) <= common)


def hallucinated_entities(
    reply: str, history: Sequence[Turn], lexicon: frozenset[str]
) -> list[str]:
    """What ``reply`` names that appears nowhere in ``history`` (its words and its tools'
    results): the lexicon's entities, and numbers of two digits or more — a street number,
    a price, a time, a phone number — that nobody said and no tool returned."""
    said = f" {_norm(reply)} "
    known = " " + " ".join(_norm(t.text) for t in history) + " "
    entities = {e for e in lexicon if f" {e} " in said and f" {e} " not in known}
    known_numbers = set(NUMBER.findall(known))
    numbers = {
        n
        for n in NUMBER.findall(said)
        if n not in known_numbers and sum(c.isdigit() for c in n) >= 2
    }
    return sorted(entities | numbers)


def same_call(made: ToolCall, wanted: ToolCall) -> bool:
    """Same method, and every argument equal (case and spacing aside), none missing or extra."""
    if made.name != wanted.name:
        return False
    try:
        got, expected = json.loads(made.arguments or "{}"), json.loads(wanted.arguments or "{}")
    except json.JSONDecodeError:
        return False
    if not isinstance(got, dict) or not isinstance(expected, dict):
        return False
    return {k: _norm(str(v)) for k, v in got.items()} == {
        k: _norm(str(v)) for k, v in expected.items()
    }


@dataclass
class ToolUseTally:
    """Counts over the agent turns of an evaluation, and the examples worth reading."""

    call_turns: int = 0
    """Turns where the corpus's agent called a service."""
    called: int = 0
    """… where the model called something."""
    exact: int = 0
    """… where the model's call matched the corpus's exactly."""
    exact_grounded: int = 0
    """… where it did once grounded in the conversation, as the offline services run it."""
    method_right: int = 0
    spoken_turns: int = 0
    """Turns where the corpus's agent spoke."""
    called_instead_of_speaking: int = 0
    hallucinating_replies: int = 0
    """Spoken replies naming an entity found neither in the conversation nor in its results."""
    unfilled_replies: int = 0
    said_back_replies: int = 0
    """Spoken replies with a date or time the caller never said, replaced by theirs."""
    """Spoken replies with a result slot the latest result could not fill (dropped)."""
    misses: list[dict[str, str]] = field(default_factory=list)
    hallucinations: list[dict[str, str]] = field(default_factory=list)

    def add_call_turn(
        self, made: Sequence[ToolCall], wanted: ToolCall, grounded: ToolCall | None = None
    ) -> None:
        """``grounded``: the model's first call as the services run it (default: as made)."""
        self.call_turns += 1
        if not made:
            self.misses.append({"wanted": _call_text(wanted), "made": "(spoke)"})
            return
        self.called += 1
        self.method_right += made[0].name == wanted.name
        self.exact += same_call(made[0], wanted)
        grounded = grounded or made[0]
        if same_call(grounded, wanted):
            self.exact_grounded += 1
        elif len(self.misses) < 20:
            miss = {"wanted": _call_text(wanted), "made": _call_text(made[0])}
            if grounded != made[0]:
                miss["grounded"] = _call_text(grounded)
            self.misses.append(miss)

    def add_spoken_turn(
        self,
        reply: str,
        made: Sequence[ToolCall],
        history: Sequence[Turn],
        lexicon: frozenset[str],
        unfilled: Sequence[str] = (),
        said_back: Sequence[str] = (),
    ) -> None:
        self.spoken_turns += 1
        if made:
            self.called_instead_of_speaking += 1
            return
        self.unfilled_replies += bool(unfilled)
        self.said_back_replies += bool(said_back)
        invented = hallucinated_entities(reply, history, lexicon)
        if invented:
            self.hallucinating_replies += 1
            if len(self.hallucinations) < 20:
                self.hallucinations.append({"reply": reply, "invented": "; ".join(invented)})

    def summary(self) -> dict[str, float | int | None]:
        def share(part: int, whole: int) -> float | None:
            return round(part / whole, 4) if whole else None

        replies = self.spoken_turns - self.called_instead_of_speaking
        return {
            "call_turns": self.call_turns,
            "call_exact_match": share(self.exact, self.call_turns),
            "call_exact_match_grounded": share(self.exact_grounded, self.call_turns),
            "call_method_right": share(self.method_right, self.call_turns),
            "called_on_call_turns": share(self.called, self.call_turns),
            "spoken_turns": self.spoken_turns,
            "called_instead_of_speaking": share(self.called_instead_of_speaking, self.spoken_turns),
            "replies_with_hallucinated_entities": share(self.hallucinating_replies, replies),
            "replies_with_unfilled_slots": share(self.unfilled_replies, replies),
            "replies_with_dates_or_times_said_back": share(self.said_back_replies, replies),
        }


def grounded_call(
    call: ToolCall, history: Sequence[Turn], services: Sequence[str], catalogue: SGDCatalogue
) -> ToolCall:
    """``call`` with its arguments grounded in ``history`` as the offline services run it
    (``SGDCatalogue.ground``); as it is where ``services`` have no such method or its
    arguments are not a JSON object."""
    method = catalogue.method_named(services, call.name)
    try:
        arguments = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return call
    if method is None or not isinstance(arguments, dict):
        return call
    grounded = catalogue.ground(method, {k: str(v) for k, v in arguments.items()}, history)
    return ToolCall(call.id, call.name, json.dumps(grounded.arguments))


@dataclass(frozen=True)
class GroundingCheck:
    """How the grounding reads a tool corpus's own calls (``cadence eval-grounding``)."""

    spoken_read: dict[str, tuple[int, int]]
    """``dates``/``times``/``counts`` → (read as the call then sent it, informed): each value a
    call sent for a slot the caller had informed in their words (their dialogue act),
    against what :func:`read_spoken_values` reads from those words."""
    calls_kept: tuple[int, int]
    """(calls grounding leaves exactly as the corpus's agent sent them, calls)."""
    replies_kept: tuple[int, int]
    """(agent replies whose dates and times ``SlotFiller`` leaves as the corpus's agent said
    them, replies)."""
    changed: list[dict[str, str]] = field(default_factory=list)
    """The first calls it changed."""

    def summary(self) -> dict[str, float]:
        shares = {k: right / max(n, 1) for k, (right, n) in self.spoken_read.items()}
        kept = {
            "calls_kept": self.calls_kept[0] / max(self.calls_kept[1], 1),
            "replies_kept": self.replies_kept[0] / max(self.replies_kept[1], 1),
        }
        return {**shares, **kept}


def check_grounding(path: Path, catalogue: SGDCatalogue, examples: int = 20) -> GroundingCheck:
    """Ground every call of the tool corpus at ``path`` in its own dialogue (a correct call
    must come out unchanged) and read the caller's informed dates, times and counts."""
    read: dict[str, list[int]] = {"dates": [0, 0], "times": [0, 0], "counts": [0, 0]}
    for line in path.read_text().splitlines():
        informed: dict[str, str] = {}
        for turn in json.loads(line)["turns"]:
            for act, slot, values in turn.get("acts", []) if turn["speaker"] == "user" else []:
                if act == "INFORM" and values:
                    informed[slot] = values[0]
            for slot, value in turn.get("call", {}).get("args", {}).items():
                kind = _spoken_kind(slot, value)
                if kind is not None and slot in informed:
                    said = getattr(read_spoken_values(informed[slot], SGD_TODAY), kind)
                    read[kind][0] += value in said
                    read[kind][1] += 1
    kept = calls = replies_kept = replies = 0
    changed: list[dict[str, str]] = []
    for dialogue in read_dialogues(path):
        rows = latest_rows(dialogue.turns)
        for index, turn in enumerate(dialogue.turns):
            history = dialogue.turns[:index]
            said = said_values(history)
            if turn.speaker == "agent" and says_date_or_time(turn.text) and said.dates + said.times:
                facts = ReplyFacts(rows[index].words, said, returned_values(history))
                replies += 1
                replies_kept += SlotFiller(None, facts).fill(turn.text) == turn.text
            for call in turn.tool_calls:
                grounded = grounded_call(call, history, dialogue.services, catalogue)
                calls += 1
                if same_call(grounded, call):
                    kept += 1
                elif len(changed) < examples:
                    said = next((t.text for t in reversed(history) if t.speaker == "user"), "")
                    changed.append(
                        {"said": said, "sent": _call_text(call), "grounded": _call_text(grounded)}
                    )
    spoken = {kind: (right, n) for kind, (right, n) in read.items()}
    return GroundingCheck(spoken, (kept, calls), (replies_kept, replies), changed)


def _spoken_kind(slot: str, value: str) -> str | None:
    if "date" in slot:
        return "dates"
    if "time" in slot:
        return "times"
    return "counts" if value.isdigit() and int(value) <= MAX_COUNT else None


def _call_text(call: ToolCall) -> str:
    return f"{call.name} {call.arguments}"
