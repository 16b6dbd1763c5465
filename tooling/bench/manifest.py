"""A benchmark manifest: one JSON object per line with `id`, `file` (relative to the
manifest), `text` (the reference transcript) and, for clips recorded or kept at telephone
quality, `file_8k` (their 8 kHz file); other keys are ignored."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ManifestClip:
    id: str
    path: Path
    text: str
    telephone_path: Path | None = None
    """The clip's 8 kHz file, which telephony benchmarks play when there is one."""


def read_manifest(path: Path) -> list[ManifestClip]:
    clips = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            telephone = row.get("file_8k")
            clips.append(
                ManifestClip(
                    row["id"],
                    path.parent / row["file"],
                    row["text"],
                    None if telephone is None else path.parent / telephone,
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{number}: not a manifest line ({exc!r})") from exc
    if not clips:
        raise ValueError(f"{path}: no clips")
    return clips
