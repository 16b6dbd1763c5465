"""Dialogues as the corpora store them: one JSON object a line with speaker-tagged turns."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cadence.llm.dialogue import Turn


@dataclass(frozen=True)
class Dialogue:
    id: str
    turns: tuple[Turn, ...]


def read_dialogues(path: Path, limit: int | None = None) -> list[Dialogue]:
    """The first ``limit`` dialogues of a JSONL corpus (all when ``None``)."""
    dialogues: list[Dialogue] = []
    for dialogue in _iter_dialogues(path):
        if limit is not None and len(dialogues) >= limit:
            break
        dialogues.append(dialogue)
    return dialogues


def write_dialogues(path: Path, dialogues: list[Dialogue]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for dialogue in dialogues:
            turns = [{"speaker": t.speaker, "text": t.text} for t in dialogue.turns]
            out.write(json.dumps({"id": dialogue.id, "turns": turns}) + "\n")


def _iter_dialogues(path: Path) -> Iterator[Dialogue]:
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if not line.strip():
                continue
            record = json.loads(line)
            turns = tuple(
                Turn(speaker="agent" if t["speaker"] == "agent" else "user", text=t["text"])
                for t in record["turns"]
                if t["text"].strip()
            )
            yield Dialogue(id=str(record["id"]), turns=turns)
