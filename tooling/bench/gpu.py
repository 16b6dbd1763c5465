"""``python -m cadence.tooling.bench.gpu --out DIR``: the one prepared check of the GPU path.

On a CUDA machine it builds full-size random-weight Fast-dLLM v2 (Qwen2.5-1.5B shape, blocks
of 32) and SDAR (Qwen3-1.7B shape, blocks of 4) directories
(:mod:`cadence.tooling.bench.full_size`), then measures, with issue 34's targets beside them:

* the commit kernel (Triton, the reference, and what the dispatcher's measured rule picks)
  and block attention at the project's shapes, with whether Triton decides as the reference;
* one denoising step per family: eager with the reference kernels, eager, and graphed;
* ten-turn conversations through the turn generator (32-token replies): first piece and whole
  reply, graphed without and with prefill, and eager;
* the embedded model (``llm/checkpoints/dllm.pt``) through the kernel bench's rows.

It writes ``DIR/report.json`` and ``DIR/report.md`` (also when a section fails: the failure is
in the report, the other sections still run) and stops starting sections once ``--budget-s``
is spent, so that it ends within five minutes. Without a GPU, ``--device cuda`` (the default)
writes a report that says so and exits with status 2; ``--device cpu`` runs the same
sections on tiny models (width 32, 2 layers, the real vocabulary), which is how its command
line and report are tested.

The device has no pip: if pydantic is missing there, carry it as wheels (docs/kernels.md).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from cadence.llm.open_weights import load_open_weights
from cadence.report.files import write_report
from cadence.tooling.bench import full_size, gpu_measures
from cadence.tooling.bench import kernels as kernel_bench

Report = dict[str, Any]
TARGETS_MS = {"fast-dllm-v2": 4.0, "sdar": 3.0}
"""Issue 34: per-step time of the graphed decoder."""
FIRST_PIECE_MS = {"p50_ms": 30.0, "p90_ms": 60.0}
NO_GPU_STATUS = 2


def _section(report: Report, name: str, budget: float, run: Callable[[], Any], out: Path) -> None:
    """Run one section into ``report[name]``; a failure is recorded, not raised. The report
    so far is written after each section (a run killed at its time limit keeps it)."""
    elapsed = time.perf_counter() - report["_started"]
    if elapsed > budget:
        report["skipped"].append(f"{name}: the {budget:.0f} s budget was spent ({elapsed:.0f} s)")
        return
    print(f"[{elapsed:6.1f} s] {name}", flush=True)
    try:
        report[name] = run()
    except Exception as exc:
        report["errors"].append(
            {"section": name, "error": repr(exc), "trace": traceback.format_exc()}
        )
        print(f"  failed: {exc!r}", flush=True)
    write({**report, "status": "partial"}, out)


def _guarded(report: Report, section: str, run: Callable[[], Any], empty: Any) -> Any:
    """``run()``, or ``empty`` with the failure recorded in the report."""
    try:
        return run()
    except Exception as exc:  # one measure's failure must not lose the others
        report["errors"].append(
            {"section": section, "error": repr(exc), "trace": traceback.format_exc()}
        )
        print(f"  {section} failed: {exc!r}", flush=True)
        return empty


def _family(
    name: str, size: full_size.Size, device: torch.device, args: argparse.Namespace, report: Report
) -> Report:
    model_spec = full_size.MODELS[name]
    out: Report = {
        "base": model_spec.base if size == "full" else "tiny",
        "block": model_spec.block_size,
    }
    with tempfile.TemporaryDirectory(prefix=f"cadence-{name}-") as scratch:
        started = time.perf_counter()
        out["parameters"] = full_size.build(name, Path(scratch), size, device)
        out["build_s"] = round(time.perf_counter() - started, 1)
        started = time.perf_counter()
        model = load_open_weights(Path(scratch), device, model_spec.block_size)
        out["load_s"] = round(time.perf_counter() - started, 1)
    steps = partial(gpu_measures.step_rows, model, device, args.repeats)
    out["steps"] = _guarded(report, f"{name} steps", steps, [])
    if device.type == "cuda":
        agree = partial(gpu_measures.agreement_row, model, device, args.reply_tokens)
        out["agreement"] = _guarded(report, f"{name} agreement", agree, None)
    out["replies"] = []
    for variant in gpu_measures.reply_variants(model, args.reply_tokens):
        print(f"  {name}: {variant.decoder}, prefill {variant.prefill}", flush=True)
        run = partial(gpu_measures.reply_row, model, variant, args.turns)
        row = _guarded(report, f"{name} replies ({variant.decoder}, {variant.prefill})", run, None)
        if row is not None:
            out["replies"].append(row)
    del model
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def _embedded(device: torch.device, repeats: int, report: Report) -> list[Report]:
    """The kernel bench's decode rows of the shipped model, one implementation at a time (a
    failure of one, e.g. a capture, leaves the others' rows)."""
    rows = []
    for implementation in kernel_bench.implementations(device, interpreter=False):
        produced: list[kernel_bench.Row] = []

        def run(
            chosen: kernel_bench.Implementation = implementation,
            into: list[kernel_bench.Row] = produced,
        ) -> None:
            with torch.inference_mode():
                into.extend(kernel_bench.decode_rows(device, [chosen], repeats))

        _guarded(report, f"embedded ({implementation.label})", run, None)
        for row in produced:
            rows.append(
                {
                    "measure": row.measure,
                    "implementation": row.implementation.label,
                    "shape": row.shape,
                    **gpu_measures.summary(row.times_ms),
                }
            )
    return rows


def targets(report: Report) -> list[Report]:
    """Issue 34's targets, each with the figure that meets or misses it."""
    checks: list[Report] = []
    commits = report.get("commit", [])
    if commits and "triton" in commits[0]:
        slower = [
            f"{r['model']} {r['shape']} {r['banned']}"
            for r in commits
            if not r["triton_not_slower"]
        ]
        wrong = [r["model"] for r in commits if not (r["same_commits"] and r["same_predictions"])]
        checks.append(
            {"target": "Triton commit decides as the reference", "met": not wrong, "value": wrong}
        )
        checks.append(
            {
                "target": "Triton commit ≤ reference at every shape",
                "met": not slower,
                "value": slower,
            }
        )
        dispatched = [  # what runs: the measured rule, within 5 % of the faster
            f"{r['model']} {r['shape']} {r['banned']}"
            for r in commits
            if r["dispatched"]["p50_ms"]
            > 1.05 * min(r["triton"]["p50_ms"], r["reference"]["p50_ms"])
        ]
        checks.append(
            {
                "target": "dispatched commit ≤ the faster of the two (+5 %) at every shape",
                "met": not dispatched,
                "value": dispatched,
            }
        )
    for name, limit in TARGETS_MS.items():
        family = report.get(name)
        if not family:
            continue
        if family.get("agreement"):
            same = family["agreement"]["captured_equals_uncaptured"]
            checks.append({"target": f"{name}: graphs decode as the uncaptured steps", "met": same,
                           "value": family["agreement"]["tokens"]})  # fmt: skip
        step = next((s for s in family["steps"] if s["step"].startswith("graphed")), None)
        if step:
            checks.append(
                {
                    "target": f"{name}: step ≤ {limit} ms",
                    "met": step["p50_ms"] <= limit,
                    "value": step["p50_ms"],
                }
            )
        graphed = {r["prefill"]: r for r in family["replies"] if r["decoder"] == "graphed"}
        for prefill, row in graphed.items():
            for key, limit_ms in FIRST_PIECE_MS.items():
                value = row["first_piece"][key]
                how = "with" if prefill else "without"
                label = f"{name}: first piece {key[:3]} ≤ {limit_ms:.0f} ms ({how} prefill)"
                checks.append({"target": label, "met": value <= limit_ms, "value": value})
        if len(graphed) == 2:
            for key in FIRST_PIECE_MS:
                with_, without = (
                    graphed[True]["first_piece"][key],
                    graphed[False]["first_piece"][key],
                )
                checks.append(
                    {
                        "target": f"{name}: first piece {key[:3]} with prefill ≤ without",
                        "met": with_ <= without,
                        "value": [with_, without],
                    }
                )
    return checks


def _cell(value: Any) -> str:
    if isinstance(value, dict) and "p50_ms" in value:
        return f"{value['p50_ms']:.3f} / {value['p90_ms']:.3f}"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _table(rows: list[Report], columns: list[str]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    lines += ["| " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return [*lines, ""]


def markdown(report: Report) -> str:
    """The report as Markdown: one table per section (times are p50 / p90 ms)."""
    title = "GPU check: no GPU" if report.get("status") == "no GPU" else "GPU check on "
    title += "" if report.get("status") == "no GPU" else str(report["device"])
    lines = [f"# {title}", "", f"`{report['command']}`", ""]
    lines += [
        f"torch {report['torch']}, Triton {report['triton']}, Python {report['python']}; "
        f"{report['size']} models; {report.get('seconds', '?')} s. Times: p50 / p90 ms.",
        "",
    ]
    if report.get("status") != "ok":
        lines += [f"**{report['status']}**: {report.get('message', '')}", ""]
    if report.get("targets"):
        lines += ["## Targets (issue 34)", ""]
        lines += _table(
            [{**t, "met": "yes" if t["met"] else "**no**"} for t in report["targets"]],
            ["target", "value", "met"],
        )
    if report.get("commit"):
        columns = ["model", "shape", "dtype", "banned", "reference", "triton", "dispatched"]
        columns += ["same_commits", "same_predictions", "confidence_max_diff"]
        lines += ["## Commit step", "", *_table(report["commit"], columns)]
    if report.get("commit_choices"):
        lines += ["Measured rule's choices:", ""]
        lines += _table(report["commit_choices"], ["shape", "dtype", "chosen"])
    if report.get("attention"):
        lines += ["## Block attention", ""]
        lines += _table(report["attention"], ["model", "shape", "reference", "triton"])
    for name in full_size.MODELS:
        family = report.get(name)
        if not family:
            continue
        lines += [
            f"## {name} ({family['base']} shape, block {family['block']}, "
            f"{family['parameters']:,} parameters; built in {family['build_s']} s, "
            f"loaded in {family['load_s']} s)",
            "",
        ]
        lines += _table(family["steps"], ["step", "shape", "p50_ms", "p90_ms", "runs"])
        if family.get("agreement"):
            lines += [f"Same tokens (2 turns, τ fixed): {family['agreement']}", ""]
        columns = ["decoder", "prefill", "first_piece", "whole_reply", "reply_tokens"]
        columns += ["steps_per_reply", "ms_per_step", "forwards_to_first_piece"]
        columns += ["forwards_per_reply", "ms_per_forward", "setup_ms", "carry_blocks"]
        lines += _table(family["replies"], columns)
    if report.get("embedded"):
        lines += ["## Embedded model (llm/checkpoints/dllm.pt)", ""]
        columns = ["measure", "implementation", "shape", "p50_ms", "p90_ms", "runs"]
        lines += _table(report["embedded"], columns)
    for note in report["skipped"]:
        lines += [f"- skipped: {note}"]
    for error in report["errors"]:
        lines += [f"- **failed** {error['section']}: `{error['error']}`"]
    return "\n".join(lines).rstrip() + "\n"


def write(report: Report, out: Path) -> None:
    clean = {k: v for k, v in report.items() if not k.startswith("_")}
    write_report(out, {"report.json": clean, "report.md": markdown(clean)})


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m cadence.tooling.bench.gpu", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", type=Path, required=True, help="folder of report.json/.md")
    parser.add_argument(
        "--device", choices=("cuda", "cpu", "auto"), default="cuda", help="default: cuda"
    )
    parser.add_argument(
        "--size", choices=("full", "tiny"), help="model size (default: full on CUDA, else tiny)"
    )
    parser.add_argument("--turns", type=int, default=10, help="timed turns per conversation")
    parser.add_argument("--repeats", type=int, default=30, help="timed calls per kernel/step")
    parser.add_argument("--reply-tokens", type=int, default=32, help="max_reply_tokens")
    parser.add_argument(
        "--budget-s", type=float, default=240.0, help="start no section after this many seconds"
    )
    parser.add_argument(
        "--sections",
        default="commit,attention,fast-dllm-v2,sdar,embedded",
        help="comma-separated subset of the sections",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    wanted = args.device
    if wanted == "auto":
        wanted = "cuda" if torch.cuda.is_available() else "cpu"
    report: Report = {
        "_started": time.perf_counter(),
        "command": " ".join(["python -m cadence.tooling.bench.gpu", *(argv or sys.argv[1:])]),
        "torch": torch.__version__,
        "triton": _triton_version(),
        "python": platform.python_version(),
        "size": args.size or ("full" if wanted == "cuda" else "tiny"),
        "skipped": [],
        "errors": [],
    }
    if wanted == "cuda" and not torch.cuda.is_available():
        report.update(
            device="no GPU",
            status="no GPU",
            message="torch sees no CUDA device (torch.cuda.is_available() is False); nothing "
            "was measured. Run with --device cpu for the tiny-model smoke run.",
        )
        write(report, args.out)
        print(f"no GPU: {report['message']}", file=sys.stderr)
        return NO_GPU_STATUS
    device = torch.device(wanted)
    report["device"] = torch.cuda.get_device_name(device) if wanted == "cuda" else "CPU"
    torch.set_num_threads(min(torch.get_num_threads(), 8))
    sections = args.sections.split(",")
    budget = args.budget_s
    # (name, what it runs, whether under torch.inference_mode), in the order they run.
    plan: list[tuple[str, Callable[[], Any], bool]] = [
        ("commit", partial(gpu_measures.commit_rows, device, args.repeats), True),
        ("attention", partial(gpu_measures.attention_rows, device, args.repeats), True),
        *(
            (name, partial(_family, name, report["size"], device, args, report), False)
            for name in full_size.MODELS
        ),
        ("embedded", partial(_embedded, device, args.repeats, report), False),
    ]
    for name, run, inference in plan:
        if name in sections:
            with torch.inference_mode() if inference else contextlib.nullcontext():
                _section(report, name, budget, run, args.out)
    report["commit_choices"] = gpu_measures.chosen_commits()
    report["targets"] = targets(report) if device.type == "cuda" else []  # a GPU's targets
    report["seconds"] = round(time.perf_counter() - report["_started"], 1)
    report["status"] = "ok" if not report["errors"] else "failed sections"
    write(report, args.out)
    print((args.out / "report.md").read_text(encoding="utf-8"), flush=True)
    return 0 if not report["errors"] else 1


def _triton_version() -> str | None:
    try:
        import triton  # type: ignore[import-untyped]
    except ImportError:
        return None
    return str(triton.__version__)


if __name__ == "__main__":
    sys.exit(main())
