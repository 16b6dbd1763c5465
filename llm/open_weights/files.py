"""The files of an open-weight checkpoint directory, read as data: no code from the directory
ever runs (no ``trust_remote_code``, no pickles, no templates).

The layout is the Hugging Face one: ``config.json``, the weights in ``model.safetensors`` or in
shards listed by ``model.safetensors.index.json``, ``tokenizer.json`` and
``tokenizer_config.json``. Every failure names the file it comes from, so a user who copied a
directory by hand learns which file is missing or wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from cadence.llm.checkpoint import CONFIG_KEY, CheckpointError

CONFIG = "config.json"
TOKENIZER = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
LAYOUT = f"{CONFIG}, {WEIGHTS} (or shards and {WEIGHTS_INDEX}), {TOKENIZER}, {TOKENIZER_CONFIG}"


class OpenWeightsError(CheckpointError):
    """A file of an open-weight checkpoint is missing, unreadable or disagrees with what its
    model family needs; the message names the config key and the file."""

    def __init__(self, path: Path, problem: str, key: str = CONFIG_KEY) -> None:
        super().__init__(f"{key}: {path}: {problem}")


@dataclass(frozen=True)
class ModelDirectory:
    root: Path

    def file(self, name: str) -> Path:
        """The path of ``name``, which must exist."""
        path = self.root / name
        if not path.is_file():
            raise OpenWeightsError(path, f"missing (a model directory holds {LAYOUT})")
        return path

    def json(self, name: str) -> dict[str, Any]:
        path = self.file(name)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise OpenWeightsError(path, f"unreadable: {exc}") from exc
        if not isinstance(data, dict):
            raise OpenWeightsError(path, "is not a JSON object")
        return data

    def weights(self, dtype: torch.dtype, device: torch.device) -> StoredWeights:
        """Every stored tensor as ``dtype`` on ``device``: from the shards the index names
        (each must exist and hold what the index says it holds), or from the single
        ``model.safetensors``."""
        index_path = self.root / WEIGHTS_INDEX
        if not index_path.is_file():
            return _read_files([self.file(WEIGHTS)], dtype, device)
        weight_map = self.json(WEIGHTS_INDEX).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise OpenWeightsError(index_path, "has no weight_map")
        shards = sorted(set(map(str, weight_map.values())))
        for shard in shards:
            if not (self.root / shard).is_file():
                raise OpenWeightsError(index_path, f"names shard {shard!r}, which is missing")
        weights = _read_files([self.root / shard for shard in shards], dtype, device)
        for name, shard in weight_map.items():
            if weights.sources.get(name) != self.root / str(shard):
                raise OpenWeightsError(
                    self.root / str(shard), f"lacks {name}, which the index places there"
                )
        return weights


@dataclass(frozen=True)
class StoredWeights:
    tensors: dict[str, torch.Tensor]
    sources: dict[str, Path]
    """The file each tensor came from, for messages."""


def _read_files(paths: list[Path], dtype: torch.dtype, device: torch.device) -> StoredWeights:
    tensors: dict[str, torch.Tensor] = {}
    sources: dict[str, Path] = {}
    for path in paths:
        try:
            with safe_open(str(path), framework="pt") as stored:
                for name in stored.keys():  # noqa: SIM118 (a safetensors handle, not a dict)
                    if name in sources:
                        raise OpenWeightsError(
                            path, f"holds {name} again (also in {sources[name]})"
                        )
                    tensors[name] = stored.get_tensor(name).to(device=device, dtype=dtype)
                    sources[name] = path
        except OpenWeightsError:
            raise
        except Exception as exc:
            raise OpenWeightsError(path, f"unreadable safetensors: {exc}") from exc
    return StoredWeights(tensors, sources)
