"""Model checkpoints: weights, model shape, dialogue format and tokenizer in one file.

The 5.9 M models trained from scratch (``embedded:dllm``, ``embedded:ar`` and their ``-tools``
variants) live in ``llm/checkpoints/`` as fp16 weights, in a checkout of the repository only:
SmolLM2's adapter replaced them as the default and they are no longer in the runtime wheel (or
the container image); the tests, the lab's training and the GPU benches still use them.
Files hold only tensors, strings and numbers, so they load with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cadence.llm.dialogue_format import DialogueFormat
from cadence.llm.model import ModelConfig, Transformer
from cadence.llm.tokenizer import DialogueTokenizer

EMBEDDED_PREFIX = "embedded:"
EMBEDDED_DIR = Path(__file__).parent / "checkpoints"
CONFIG_KEY = "models.llm.checkpoint"


class CheckpointError(RuntimeError):
    """A checkpoint is missing or unreadable, or cannot run as configured; the message names
    the config key to fix."""


@dataclass
class LoadedModel:
    model: Transformer
    format: DialogueFormat
    metadata: dict[str, Any]

    @property
    def tokenizer(self) -> DialogueTokenizer:
        return self.format.tokenizer


def resolve_checkpoint(name: str) -> Path:
    """Path of ``embedded:NAME`` or of a file path; fails fast when it does not exist."""
    if name.startswith(EMBEDDED_PREFIX):
        stem = name.removeprefix(EMBEDDED_PREFIX)
        path = EMBEDDED_DIR / f"{stem}.pt"
        if not path.is_file():
            shipped = sorted(p.stem for p in EMBEDDED_DIR.glob("*.pt"))
            if not shipped:
                raise CheckpointError(
                    f"{CONFIG_KEY}: {name!r} is one of the 5.9 M models, which the installed "
                    "package does not carry (a checkout of the repository has them in "
                    "llm/checkpoints/); the default is embedded:smollm2-ar"
                )
            raise CheckpointError(
                f"{CONFIG_KEY}: no embedded checkpoint {name!r} "
                f"(shipped: {', '.join(EMBEDDED_PREFIX + s for s in shipped)})"
            )
        return path
    path = Path(name).expanduser()
    if not path.is_file():
        raise CheckpointError(f"{CONFIG_KEY}: checkpoint file {str(path)!r} does not exist")
    return path


def model_payload(
    model: Transformer, fmt: DialogueFormat, metadata: dict[str, Any], dtype: torch.dtype
) -> dict[str, Any]:
    """What :func:`load_model` reads back, with the weights stored as ``dtype``."""
    return {
        "model_config": model.config.to_dict(),
        "max_turn_tokens": fmt.max_turn_tokens,
        "tokenizer": fmt.tokenizer.to_json(),
        "state_dict": {k: v.detach().to(dtype) for k, v in model.state_dict().items()},
        "metadata": metadata,
    }


def save_model(
    path: Path,
    model: Transformer,
    fmt: DialogueFormat,
    metadata: dict[str, Any],
    dtype: torch.dtype = torch.float16,
) -> None:
    save_atomically(path, model_payload(model, fmt, metadata, dtype))


def save_atomically(path: Path, payload: dict[str, Any]) -> None:
    """Write then rename, so an interruption never leaves a half-written checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(path.suffix + ".partial")
    torch.save(payload, partial)
    partial.replace(path)


def load_model(name: str | Path) -> LoadedModel:
    """Load ``embedded:NAME`` or a checkpoint file (compact or training) in fp32, eval mode."""
    path = resolve_checkpoint(str(name))
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"{CONFIG_KEY}: cannot read checkpoint {str(path)!r}: {exc}") from exc
    return model_from_payload(payload.get("model", payload))  # a training state holds one


def model_from_payload(payload: dict[str, Any]) -> LoadedModel:
    config = ModelConfig(**payload["model_config"])
    model = Transformer(config)
    model.load_state_dict({k: v.float() for k, v in payload["state_dict"].items()})
    model.eval()
    tokenizer = DialogueTokenizer.from_json(payload["tokenizer"])
    fmt = DialogueFormat(tokenizer, config.block_size, payload["max_turn_tokens"])
    return LoadedModel(model, fmt, dict(payload.get("metadata", {})))
