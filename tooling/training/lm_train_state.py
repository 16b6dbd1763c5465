"""A phase's resumable state, and where it is written: the state file, the fp16 adapter and
the metrics so far — and, when the state travels between device calls, its carried parts.

Apart from the loop so that what is saved and what a resumed phase reads back are defined in
one place: ``state_dir/PHASE.pt`` holds the adapter in float32, AdamW's moments and the
:class:`PhaseState` (the step, the schedule's length, the losses), written atomically, so a
call cut at its time limit leaves either the old state or the new one, never half of one.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cadence.tooling.training.lm_adapter import CALL_ID, MASK_ID, ROWS, lora_state, save_adapter
from cadence.tooling.training.lm_carry import split_state
from cadence.tooling.training.lm_train_options import AdapterOptions, Phase

ADAPTER = "smollm2-{phase}.safetensors"
METRICS = "metrics.json"


@dataclass
class PhaseState:
    step: int = 0
    total_steps: int = 0
    tokens: int = 0
    """Window positions seen (padding included: what the hardware processed)."""
    written_tokens: int = 0
    """Tokens the loss was taken on."""
    seconds: float = 0.0
    loss: list[list[float]] = field(default_factory=list)
    """``[step, mean NLL per token]`` every ``log_every`` steps."""
    validation_nll: float | None = None
    done: bool = False


def checkpoint(
    options: AdapterOptions,
    phase: Phase,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    state: PhaseState,
    path: Path,
    metrics: dict[str, Any],
) -> None:
    """The resumable state (atomically), the fp16 adapter and the metrics so far."""
    temporary = path.with_suffix(".tmp")
    payload = {
        "lora": lora_state(model),
        "optimizer": optimizer.state_dict(),
        "state": dataclasses.asdict(state),
    }
    torch.save(payload, temporary)
    temporary.replace(path)
    if options.carry_dir is not None:
        info = {"phase": phase, "step": state.step, "tokens": state.tokens, "done": state.done}
        split_state(path, options.carry_dir / phase, info)
    meta = {
        "objective": phase,
        "rank": options.rank,
        "alpha": options.alpha,
        "block_size": options.block_size if phase == "bd" else None,
        "shifted": True,
        "mask_id": MASK_ID if phase == "bd" else None,
        "call_id": CALL_ID,
        "token_rows": list(ROWS),
        "base": options.gguf.name,
        "base_sha256": options.expected_sha256,
        "layers": options.layers,
        "steps": state.step,
        "finished": state.done,
        "tokens": state.tokens,
    }
    save_adapter(options.out_dir / ADAPTER.format(phase=phase), model, meta)
    write_json(options.out_dir / METRICS, {**metrics, phase: dataclasses.asdict(state)})


def write_json(path: Path, value: dict[str, Any]) -> None:
    """``value`` as JSON at ``path``, atomically (a temporary file, then renamed)."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(value, indent=1) + "\n")
    temporary.replace(path)
