"""A benchmark manifest: one JSON object per line with `id`, `file` (relative to the
manifest) and `text` (the reference transcript); other keys are kept but unused."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ManifestClip:
    id: str
    path: Path
    text: str


def read_manifest(path: Path) -> list[ManifestClip]:
    clips = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            clips.append(ManifestClip(row["id"], path.parent / row["file"], row["text"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{number}: not a manifest line ({exc!r})") from exc
    if not clips:
        raise ValueError(f"{path}: no clips")
    return clips
