"""How every report of Cadence and its lab is written: one folder, each file named for what it
holds, written one way — text as it is, a figure drawn to PNG, anything else as indented JSON.

Why one writer: a report read beside another (a budget report beside the turn-taking bench's,
this run beside last month's) should not differ in how it was written — encodings, trailing
newlines, figure resolution — only in what it says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeAlias

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI: Final = 120
"""Every figure's resolution."""

ReportFile: TypeAlias = "str | Mapping[str, object] | Sequence[object] | Figure"
"""A file's content: text (Markdown, or JSON already serialised), JSON data, or a figure."""


def write_report(out: Path, files: Mapping[str, ReportFile]) -> None:
    """Write ``files`` (name → content) into the folder ``out``, made if missing."""
    out.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        path = out / name
        if isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        elif isinstance(content, Mapping | Sequence):
            text = json.dumps(content, indent=2, ensure_ascii=False, default=str)
            path.write_text(text + "\n", encoding="utf-8")
        else:
            save_figure(content, path)


def save_figure(fig: Figure, path: Path) -> None:
    """Draw ``fig`` into a PNG file (no pyplot, no display)."""
    # Imported here: a command that writes no figure does not load matplotlib.
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=DPI)
