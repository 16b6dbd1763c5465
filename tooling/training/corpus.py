"""Dialogues as the corpora store them: one JSON object a line with speaker-tagged turns.

An agent turn of the tool corpora (``sgd_tools_*.jsonl``) may carry the service ``call`` the
agent made before speaking and its ``results``: it becomes three turns, in the tool API's
shape (``cadence.llm.dialogue``) — the agent's call, the call's result (what the SGD service
returned: ``{"n_results": N, "results": [the first rows]}``) and the agent's words.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cadence.llm.dialogue import Speaker, ToolCall, Turn


@dataclass(frozen=True)
class Dialogue:
    id: str
    turns: tuple[Turn, ...]
    services: tuple[str, ...] = ()
    """The SGD services the dialogue uses (the tool corpora say)."""


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
            turns: list[Turn] = []
            for t in record["turns"]:
                if "call" in t:
                    turns += _tool_turns(t, f"call_{len(turns)}")
                if t["text"].strip():
                    speaker: Speaker = "agent" if t["speaker"] == "agent" else "user"
                    turns.append(Turn(speaker=speaker, text=t["text"]))
            services = tuple(record.get("services", ()))
            yield Dialogue(id=str(record["id"]), turns=tuple(turns), services=services)


def _tool_turns(turn: dict[str, Any], call_id: str) -> tuple[Turn, Turn]:
    """The call an SGD agent turn made and what the service returned."""
    call = turn["call"]
    results = turn.get("results", [])
    result = {"n_results": turn.get("n_results", len(results)), "results": results}
    return (
        Turn(
            "agent", "", tool_calls=(ToolCall(call_id, call["method"], json.dumps(call["args"])),)
        ),
        Turn("tool", json.dumps(result), tool_call_id=call_id),
    )


def has_tool_turns(dialogues: list[Dialogue]) -> bool:
    return any(turn.tool_calls for dialogue in dialogues for turn in dialogue.turns)
