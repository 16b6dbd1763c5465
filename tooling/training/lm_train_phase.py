"""One phase of ``cadence train-adapters``: the training loop of the AR or the block-diffusion
adapter, its learning-rate schedule, and its validation loss.

Each epoch's order comes from ``seed`` and the epoch, each step's noise from ``seed`` and the
step, so a resumed phase trains on what a continuous one would have. A phase given ``minutes``
measures its first steps and shortens its schedule to end in time (the learning rate still
decays to its floor), so a device call ends with finished adapters rather than cut ones.
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from cadence.tooling.training.lm_adapter import load_lora_state
from cadence.tooling.training.lm_objectives import (
    ar_loss,
    block_diffusion_loss,
    block_diffusion_mask,
    check_block_attention,
)
from cadence.tooling.training.lm_train_options import AdapterOptions, Phase
from cadence.tooling.training.lm_train_state import PhaseState, checkpoint

MEASURED_STEPS = (3, 10)
"""Steps whose mean time sets a timed phase's schedule (the first are warm-up)."""

Windows = tuple[torch.Tensor, torch.Tensor]


def train_phase(
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
    if state.done and options.accumulate:  # another call's worth, from where the last ended
        state.done = False
        state.total_steps = state.step + (options.ar_steps if phase == "ar" else options.bd_steps)
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
            checkpoint(options, phase, model, optimizer, state, path, metrics)
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
            checkpoint(options, phase, model, optimizer, state, path, metrics)
            last_save = time.monotonic()
    if logged[1]:  # the steps since the last line (a timed phase ends off the beat)
        state.loss.append([state.step, logged[0] / logged[1]])
        print(f"{phase} step {state.step}/{state.total_steps} loss {state.loss[-1][1]:.4f}")
    state.validation_nll = _validation_nll(options, phase, model, validation, allowed)
    state.done = True
    checkpoint(options, phase, model, optimizer, state, path, metrics)
    return state


def _batch_rows(seed: int, step: int, per_epoch: int, batch: int, count: int) -> torch.Tensor:
    """The windows of ``step``: the epoch's seeded permutation, cut in batches."""
    epoch, index = divmod(step, per_epoch)
    order = np.random.default_rng(seed * 7919 + epoch).permutation(count)
    return torch.from_numpy(order[index * batch : (index + 1) * batch])


def _schedule(step: int, total: int, options: AdapterOptions) -> float:
    """Linear warm-up, then cosine down to ``min_lr_ratio`` — or, for training that
    accumulates across calls, held: no call knows how many will follow it."""
    if step < options.warmup_steps:
        return (step + 1) / options.warmup_steps
    if options.accumulate:
        return 1.0
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
