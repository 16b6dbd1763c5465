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
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from cadence.tooling.training.lm_adapter import attach_lora, load_base, load_lora_state, sha256
from cadence.tooling.training.lm_carry import carried, join_state, log_run
from cadence.tooling.training.lm_train_options import AdapterOptions, jsonable
from cadence.tooling.training.lm_train_phase import Windows, train_phase
from cadence.tooling.training.lm_train_state import METRICS, write_json


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
    if options.carry_dir is not None:
        for phase in options.phases:
            _take_carried(options.carry_dir / phase, state_dir / f"{phase}.pt")
    metrics: dict[str, Any] = {"options": jsonable(options), "device": str(device)}
    metrics["data"] = json.loads(bytes(data["meta"]).decode())
    for phase in options.phases:
        if phase == "bd" and "ar" not in options.phases and (state_dir / "ar.pt").exists():
            load_lora_state(model, torch.load(state_dir / "ar.pt", weights_only=True)["lora"])
        try:  # diffusion starts from the AR phase's adapter, in the model now
            state = train_phase(options, phase, model, windows, validation, state_dir, metrics)
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
    write_json(options.out_dir / METRICS, metrics)
    if options.carry_dir is not None:
        for phase in options.phases:
            if isinstance(metrics.get(phase), dict):
                record = {"device": str(device), "seconds": metrics["seconds"]}
                log_run(options.carry_dir / phase, record | _summary(metrics[phase]))
    return metrics


def _take_carried(carry: Path, state_file: Path) -> None:
    """The carried state in place of ``state_file``, unless that one is further on."""
    manifest = carried(carry)
    if manifest is None:
        return
    if state_file.exists():
        local = torch.load(state_file, weights_only=False)["state"]["step"]
        if local >= manifest["step"]:
            return
    join_state(carry, state_file.parent)


def _summary(phase: dict[str, Any]) -> dict[str, Any]:
    """What the run log keeps of a phase's state: where it got to, and how well."""
    keys = ("step", "tokens", "written_tokens", "seconds", "validation_nll", "done", "error")
    last = phase.get("loss") or [[None, None]]
    return {k: phase[k] for k in keys if k in phase} | {"last_loss": last[-1][1]}


def _windows(ids: np.ndarray[Any, Any], packed: np.ndarray[Any, Any]) -> Windows:
    written = np.unpackbits(packed, axis=1)[:, : ids.shape[1]].astype(bool)
    return torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(written)


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
        elif "bool" in kind:
            converted[key] = text.lower() in ("1", "true", "yes")
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
