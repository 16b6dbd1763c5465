"""``Turn``: one speaker's turn of a conversation, the unit every turn generator reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Speaker = Literal["user", "agent"]


@dataclass(frozen=True)
class Turn:
    speaker: Speaker
    text: str
