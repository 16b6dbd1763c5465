"""``run.json``: what a trace log cannot say about its own run (the machine, the command line,
the configuration and budget it ran under), kept beside the traces.

``build_report`` writes it into every report directory; ``cadence report`` reads the one beside
the traces it is given, so a report rebuilt from a bench's ``traces.jsonl`` names the bench's
machine and command and uses its budget, and its ``summary.json`` is the bench's own.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, ValidationError

from cadence.pipeline.config import BudgetConfig

RUN_FILE: Final = "run.json"


class RunInfo(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    machine: str
    command: str | None
    config: dict[str, Any] | None
    budget: BudgetConfig


def machine_description() -> str:
    """This machine, as a run records it."""
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def run_info_json(info: RunInfo) -> str:
    """``run.json``'s text (``report/files.py`` writes it)."""
    return info.model_dump_json(indent=2) + "\n"


def read_run_info(traces: Path) -> RunInfo | None:
    """The ``run.json`` beside ``traces``; ``None`` if there is none. An unreadable one raises
    ``ValueError`` rather than silently reporting against the wrong budget."""
    path = traces.parent / RUN_FILE
    if not path.is_file():
        return None
    try:
        return RunInfo.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as exc:
        raise ValueError(f"{path}: not a Cadence run description: {exc}") from exc
