"""A training phase's state as it travels to a GPU device and back: cut in parts under the
carry limit, each part and the whole checked by SHA-256 when it is put back together.

Why parts: a device call carries at most 64 MiB of files each way, and the repository keeps
no file over 16 MiB; the whole state of the block-diffusion phase (the adapter in float32,
AdamW's two moments, the step — from which the data position and every random draw follow,
``lm_train_phase``) is ~59 MB. The state file is cut byte for byte, so what is joined is the
very file that was cut: a phase resumed from the carried parts goes on exactly as it would
have from its own disk (``tests/test_lm_adapters.py``). ``runs.jsonl`` beside the parts is
the log of the calls that trained it, one line a call.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

PART_BYTES = 15 * 2**20
"""Under the repository's 16 MiB a file, with room to spare."""
MANIFEST = "state.json"
RUNS = "runs.jsonl"


class CarryError(ValueError):
    """Carried parts that cannot be put back together: missing, cut short or altered."""


def split_state(
    state_file: Path, carry_dir: Path, info: dict[str, Any], *, part_bytes: int = PART_BYTES
) -> dict[str, Any]:
    """Cut ``state_file`` into parts of at most ``part_bytes`` in ``carry_dir``, with a
    manifest of their digests and ``info`` (the step, the tokens seen); old parts go."""
    data = state_file.read_bytes()
    carry_dir.mkdir(parents=True, exist_ok=True)
    parts = []
    for number, start in enumerate(range(0, max(len(data), 1), part_bytes)):
        chunk = data[start : start + part_bytes]
        name = f"{state_file.stem}.part{number:03d}"
        _write(carry_dir / name, chunk)
        parts.append({"name": name, "bytes": len(chunk), "sha256": _digest(chunk)})
    manifest = {
        "file": state_file.name,
        "bytes": len(data),
        "sha256": _digest(data),
        "parts": parts,
    } | info
    kept = {part["name"] for part in parts}
    for stale in carry_dir.glob(f"{state_file.stem}.part*"):
        if stale.name not in kept:
            stale.unlink()
    _write(carry_dir / MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode())
    return manifest


def carried(carry_dir: Path) -> dict[str, Any] | None:
    """The manifest of the state carried in ``carry_dir``, if there is one."""
    path = carry_dir / MANIFEST
    if not path.is_file():
        return None
    manifest: dict[str, Any] = json.loads(path.read_text())
    return manifest


def join_state(carry_dir: Path, state_dir: Path) -> Path:
    """Put the carried parts back together as ``state_dir/<file>``; raises
    :class:`CarryError` naming what is wrong rather than writing a state that is not it."""
    manifest = carried(carry_dir)
    if manifest is None:
        raise CarryError(f"{carry_dir}: no {MANIFEST}")
    chunks = []
    for part in manifest["parts"]:
        path = carry_dir / part["name"]
        if not path.is_file():
            raise CarryError(f"{path}: a part of the carried state is missing")
        chunk = path.read_bytes()
        if len(chunk) != part["bytes"] or _digest(chunk) != part["sha256"]:
            raise CarryError(f"{path}: not the part that was carried (size or SHA-256)")
        chunks.append(chunk)
    data = b"".join(chunks)
    if _digest(data) != manifest["sha256"]:
        raise CarryError(f"{carry_dir}: the joined state is not the one that was cut")
    state_dir.mkdir(parents=True, exist_ok=True)
    out = state_dir / str(manifest["file"])
    _write(out, data)
    return out


def log_run(carry_dir: Path, record: dict[str, Any]) -> None:
    """Append one call's record to the carried log."""
    carry_dir.mkdir(parents=True, exist_ok=True)
    with (carry_dir / RUNS).open("a", encoding="utf-8") as log:
        log.write(json.dumps(record) + "\n")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write(path: Path, data: bytes) -> None:
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_bytes(data)
    temporary.replace(path)
