"""``cadence build-sgd-catalogue`` (the data of the offline SGD services), ``cadence
eval-grounding`` (how they ground a call's arguments) and ``cadence build-lane-corpus``
(training material for staying in lane): docs/tools.md, docs/llm.md."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

DATA_DIR = Path("../shared/data/dialogue")
PACKAGED = Path("pipeline/tools/data/sgd_services.json.gz")


def build_sgd_catalogue(
    data_dir: Path = typer.Option(
        DATA_DIR, "--data", help="Folder of sgd_tools_*.jsonl and schemas_*.json."
    ),
    service: list[str] | None = typer.Option(
        None,
        "--service",
        help="An SGD service to serve (repeatable); default: every one"
        " of the training split's schemas.",
    ),
    out: Path = typer.Option(PACKAGED, "--out", help="The catalogue to write (.json.gz)."),
) -> None:
    """Collect the chosen SGD services' schemas and the rows their calls returned in the
    training and development dialogues (never the test ones) into the offline catalogue."""
    from cadence.tooling.training.sgd_catalogue import build_catalogue, training_services

    counts = build_catalogue(data_dir, service or training_services(data_dir), out)
    console = Console(stderr=True)
    for method, rows in counts.items():
        console.print(f"{method}: {rows:,} rows")
    console.print(f"wrote {out} ({out.stat().st_size:,} bytes)")


def eval_grounding(
    corpus: Path = typer.Option(
        DATA_DIR / "sgd_tools_dev.jsonl", "--corpus", help="A tool corpus (sgd_tools_*.jsonl)."
    ),
    json_out: Path | None = typer.Option(None, "--json", help="Write the figures here."),
) -> None:
    """Ground the corpus's own calls in their dialogues (they should come out unchanged) and
    read the callers' dates, times and counts against what the calls then sent."""

    from cadence.pipeline.tools.sgd_services import packaged_catalogue
    from cadence.report.files import write_report
    from cadence.tooling.training.tool_evaluation import check_grounding

    check = check_grounding(corpus, packaged_catalogue())
    console = Console()
    for kind, (right, n) in check.spoken_read.items():
        console.print(
            f"{kind} read as the call sent them: {right:,} of {n:,} ({right / max(n, 1):.2%})"
        )
    kept, calls = check.calls_kept
    console.print(f"calls left as sent: {kept:,} of {calls:,} ({kept / max(calls, 1):.2%})")
    said, replies = check.replies_kept
    console.print(
        f"replies whose dates and times stay as said: {said:,} of {replies:,}"
        f" ({said / max(replies, 1):.3%})"
    )
    for example in check.changed[:5]:
        console.print(f"  changed: {example}")
    if json_out is not None:
        report: dict[str, object] = {"command": "cadence eval-grounding", "corpus": str(corpus)}
        report["shares"] = check.summary()
        report["spoken_read"] = {
            k: {"right": r, "of": n} for k, (r, n) in check.spoken_read.items()
        }
        report["calls_kept"] = {"kept": kept, "of": calls}
        report["replies_kept"] = {"kept": said, "of": replies}
        report["changed"] = check.changed
        write_report(json_out.parent, {json_out.name: report})


def build_lane_corpus(
    data_dir: Path = typer.Option(DATA_DIR, "--data", help="Folder of sgd_tools_train.jsonl."),
    out: Path = typer.Option(..., "--out", help="Training dialogues to write (.jsonl)."),
    test_out: Path = typer.Option(
        ..., "--test-out", help="Evaluation dialogues (held-out topics and noise) to write."
    ),
    examples: int = typer.Option(3000, "--examples", help="Training dialogues."),
    seed: int = typer.Option(0, "--seed", help="Seed of every choice."),
) -> None:
    """Write dialogues where the agent greets, says what it can do, declines what no service
    does and asks again on noise; train on them with `cadence train --corpus`."""
    from cadence.tooling.training.in_lane import build_lane_corpus as build

    counts = build(data_dir / "sgd_tools_train.jsonl", out, test_out, examples, seed=seed)
    Console(stderr=True).print(", ".join(f"{k} {v}" for k, v in counts.items()))
