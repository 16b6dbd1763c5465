"""``cadence train``, ``cadence generate`` and ``cadence eval-lm``: the turn generator's
commands. Torch loads only when one of them runs, so the rest of the CLI stays quick."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from cadence.cli.config_option import CONFIG_OPTION, EXIT_BAD_CONFIG, load_config_or_exit
from cadence.report.files import write_report

DATA_DIR = Path("../shared/data/dialogue")
DEFAULT_CORPORA = ("sgd_train", "taskmaster4", "woz2", "camrest676")


def train_command(
    objective: str = typer.Option(..., "--objective", help="bd3 (block diffusion) or ar."),
    out: Path = typer.Option(..., "--out", help="Output folder; rerun to resume from it."),
    data_dir: Path = typer.Option(DATA_DIR, "--data-dir", help="Folder of the JSONL corpora."),
    corpus: list[str] = typer.Option(
        list(DEFAULT_CORPORA), "--corpus", help="Training corpus name or path (repeatable)."
    ),
    validation: str = typer.Option("sgd_dev", "--validation", help="Validation corpus."),
    init: Path | None = typer.Option(None, "--init", help="Start from this checkpoint."),
    epochs: float = typer.Option(1.0, "--epochs", help="Length of the schedule."),
    max_minutes: float | None = typer.Option(
        None, "--max-minutes", help="Stop resumably after this long."
    ),
    learning_rate: float = typer.Option(1e-3, "--lr", help="Peak learning rate."),
    warmup: int = typer.Option(100, "--warmup", help="Warm-up steps of the learning rate."),
    tokens_per_batch: int = typer.Option(4096, "--batch-tokens", help="Tokens per batch."),
    seed: int = typer.Option(0, "--seed", help="Seed of data order, noise and init."),
    max_turn_tokens: int = typer.Option(
        40, "--max-turn-tokens", help="A turn's tokens at most (a multiple of the block)."
    ),
    window_tokens: int = typer.Option(
        192, "--window-tokens", help="A training sequence's tokens at most."
    ),
    window_turns: int = typer.Option(6, "--window-turns", help="Its turns at most."),
    threads: int | None = typer.Option(None, "--threads", help="Torch CPU threads."),
) -> None:
    """Train the block-diffusion model or the AR baseline, with checkpoints and resume. A
    corpus with tool calls (sgd_tools_train) teaches the model to call tools."""
    from cadence.tooling.training.trainer import TrainOptions, TrainProgress, train

    if objective not in ("bd3", "ar"):
        raise typer.BadParameter("--objective must be bd3 or ar")
    kind: Literal["bd3", "ar"] = "bd3" if objective == "bd3" else "ar"
    options = TrainOptions(
        objective=kind,
        corpora=tuple(_corpus_path(data_dir, name) for name in corpus),
        validation=_corpus_path(data_dir, validation) if validation else None,
        out_dir=out,
        init=init,
        epochs=epochs,
        max_minutes=max_minutes,
        learning_rate=learning_rate,
        warmup_steps=warmup,
        tokens_per_batch=tokens_per_batch,
        seed=seed,
        max_turn_tokens=max_turn_tokens,
        window_tokens=window_tokens,
        window_turns=window_turns,
        threads=threads,
    )
    console = Console(stderr=True)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("step {task.completed:.0f}/{task.fields[steps]}"),
        TextColumn("loss {task.fields[loss]:.3f}"),
        TextColumn("{task.fields[speed]:,.0f} tok/s"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
    ) as bar:
        task = bar.add_task(
            f"train {objective}", total=None, loss=float("nan"), speed=0.0, steps="?"
        )

        def on_step(progress: TrainProgress, loss: float, speed: float, total: int) -> None:
            bar.update(
                task, completed=progress.step, total=total, loss=loss, speed=speed, steps=total
            )
            if not console.is_terminal and progress.step % 50 == 0:
                console.print(
                    f"step {progress.step}/{total} epoch {progress.epoch} loss {loss:.3f} "
                    f"{speed:,.0f} tok/s",
                    highlight=False,
                )

        progress = train(options, on_step)
    last = progress.history[-1] if progress.history else {}
    console.print(f"stopped at step {progress.step}: {last}", highlight=False)


def _corpus_path(data_dir: Path, name: str) -> Path:
    path = Path(name)
    return path if path.suffix == ".jsonl" else data_dir / f"{name}.jsonl"


def distil_command(
    teacher: Path = typer.Option(..., "--teacher", help="AR checkpoint whose replies to learn."),
    out: Path = typer.Option(..., "--out", help="Distilled corpus (JSONL) to write."),
    data_dir: Path = typer.Option(DATA_DIR, "--data-dir", help="Folder of the JSONL corpora."),
    corpus: list[str] = typer.Option(
        list(DEFAULT_CORPORA), "--corpus", help="Source corpus name or path (repeatable)."
    ),
    dialogues: int = typer.Option(2000, "--dialogues", help="Dialogues drawn at random."),
    seed: int = typer.Option(0, "--seed", help="Seed of the draw."),
    threads: int | None = typer.Option(None, "--threads", help="Torch CPU threads."),
    config: Path | None = CONFIG_OPTION,
) -> None:
    """Write a corpus whose agent turns are the AR teacher's greedy replies."""
    import random

    import torch

    from cadence.llm.checkpoint import load_model
    from cadence.tooling.training.corpus import read_dialogues, write_dialogues
    from cadence.tooling.training.distillation import distil_dialogues

    if threads:
        torch.set_num_threads(threads)
    settings = load_config_or_exit(config).models.llm
    loaded = load_model(teacher)
    pool = [d for name in corpus for d in read_dialogues(_corpus_path(data_dir, name))]
    chosen = random.Random(seed).sample(pool, min(dialogues, len(pool)))
    with Progress(
        TextColumn("[bold]distil"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
    ) as bar:
        task = bar.add_task("distil", total=len(chosen))
        distilled = distil_dialogues(
            loaded,
            chosen,
            settings.history_turns,
            settings.max_context_tokens,
            on_batch=lambda done: bar.update(task, completed=done),
        )
    write_dialogues(out, distilled)
    Console(stderr=True).print(f"wrote {len(distilled)} dialogues to {out}", highlight=False)


def generate_command(
    text: str = typer.Argument(..., help="What the user just said."),
    history: Path | None = typer.Option(
        None, "--history", help='Earlier turns: JSON list of {"speaker", "text"} (or a dialogue).'
    ),
    backend: str | None = typer.Option(None, "--backend", help="dllm or ar (default: config)."),
    checkpoint: str | None = typer.Option(
        None, "--checkpoint", help="Default: the config's, or embedded:BACKEND."
    ),
    config: Path | None = CONFIG_OPTION,
) -> None:
    """Stream the agent's reply to TEXT, each piece with its time since the start."""
    import asyncio
    import json

    from cadence.llm.backends import load_local_generator
    from cadence.llm.checkpoint import CheckpointError
    from cadence.llm.dialogue import Turn

    settings = load_config_or_exit(config).models.llm
    chosen = backend or settings.backend
    if chosen not in ("dllm", "ar"):
        raise typer.BadParameter("--backend must be dllm or ar")
    if checkpoint is None:
        checkpoint = settings.checkpoint if chosen == settings.backend else f"embedded:{chosen}"
    settings = settings.model_copy(update={"backend": chosen, "checkpoint": checkpoint})
    turns: list[Turn] = []
    if history is not None:
        record = json.loads(history.read_text(encoding="utf-8"))
        items = record["turns"] if isinstance(record, dict) else record
        turns = [Turn("agent" if t["speaker"] == "agent" else "user", t["text"]) for t in items]
    turns.append(Turn("user", text))
    console = Console()
    try:
        generator = load_local_generator(settings)
    except CheckpointError as exc:
        Console(stderr=True).print(f"[bold red]error[/] {exc}", highlight=False)
        raise typer.Exit(EXIT_BAD_CONFIG) from exc

    async def run() -> None:
        async for piece in generator.stream(turns):
            start = generator.last_stats.start_ms
            console.print(f"{piece.at_ms - start:8.1f} ms  {piece.text!r}", highlight=False)

    asyncio.run(run())
    stats = generator.last_stats
    steps = stats.steps_per_block
    detail = (
        f"{len(steps)} blocks, steps per block {steps}"
        if chosen == "dllm"
        else f"{len(steps)} steps"
    )
    console.print(
        f"[bold]{stats.text}[/]\n{len(stats.token_ids)} tokens in "
        f"{stats.end_ms - stats.start_ms:.1f} ms; "
        f"{detail}; {stats.prefilled_tokens} context tokens prefilled",
        highlight=False,
    )


def eval_lm_command(
    corpus: Path = typer.Option(..., "--corpus", help="Dialogues (JSONL) to evaluate on."),
    dialogues: int = typer.Option(50, "--dialogues", help="First N dialogues of the corpus."),
    json_out: Path | None = typer.Option(None, "--json", help="Also write the report here."),
    dllm: str = typer.Option("embedded:dllm", "--dllm", help="Diffusion checkpoint."),
    ar: str = typer.Option("embedded:ar", "--ar", help="AR baseline checkpoint."),
    adapted: list[str] = typer.Option(
        [],
        "--adapted",
        help="NAME=ADAPTER, repeatable: SmolLM2 with an adapter as well (e.g. "
        "smollm2-ar=embedded:smollm2-ar smollm2-dllm=embedded:smollm2-dllm).",
    ),
    embedded: bool = typer.Option(
        True, "--embedded/--no-embedded", help="Also measure --dllm and --ar."
    ),
    threads: int = typer.Option(2, "--threads", help="Torch CPU threads."),
    threshold: float | None = typer.Option(
        None, "--threshold", help="Override models.llm.confidence_threshold (τ)."
    ),
    train_corpus: Path | None = typer.Option(
        None,
        "--train-corpus",
        help="The tool corpus the models were trained on: the entities they may have learned"
        " (for the hallucination check) and the services they saw.",
    ),
    seen_services_only: bool = typer.Option(
        False, "--seen-services-only", help="Only dialogues whose services --train-corpus has."
    ),
    config: Path | None = CONFIG_OPTION,
) -> None:
    """Measure the diffusion model and the AR baseline side by side on CORPUS (with a tool
    corpus, also their calls and any entities they invent)."""
    from functools import partial

    import torch
    from rich.table import Table

    from cadence.llm.checkpoint import load_model
    from cadence.llm.generator import GeneratorOptions
    from cadence.tooling.training.corpus import read_dialogues
    from cadence.tooling.training.evaluation import evaluate_backend
    from cadence.tooling.training.tool_evaluation import entity_lexicon

    torch.set_num_threads(threads)
    settings = load_config_or_exit(config).models.llm
    if threshold is not None:
        settings = settings.model_copy(update={"confidence_threshold": threshold})
    options = GeneratorOptions.from_options(settings)
    trained_on = read_dialogues(train_corpus) if train_corpus else []
    if seen_services_only:
        if not trained_on:
            raise typer.BadParameter("--seen-services-only needs --train-corpus")
        seen = {service for d in trained_on for service in d.services}
        everything = read_dialogues(corpus)
        chosen = [d for d in everything if d.services and set(d.services) <= seen][:dialogues]
    else:
        chosen = read_dialogues(corpus, dialogues)
    lexicon = entity_lexicon(t for d in [*trained_on, *chosen] for t in d.turns)
    replies = sum(t.speaker == "agent" for d in chosen for t in d.turns)
    reports = []
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    ) as bar:
        for name, checkpoint in (("dllm", dllm), ("ar", ar)) if embedded else ():
            task = bar.add_task(name, total=replies)
            reports.append(
                evaluate_backend(
                    name,
                    checkpoint,
                    load_model(checkpoint),
                    options,
                    chosen,
                    on_reply=partial(bar.advance, task),
                    lexicon=lexicon,
                )
            )
        for spec in adapted:
            from cadence.tooling.training.adapted_evaluation import evaluate_adapted

            name, _, checkpoint = spec.partition("=")
            task = bar.add_task(name, total=replies)
            reports.append(
                evaluate_adapted(
                    name,
                    checkpoint or name,
                    options,
                    chosen,
                    on_reply=partial(bar.advance, task),
                    lexicon=lexicon,
                )
            )
    table = Table(title=f"{corpus.name}: {len(chosen)} dialogues, {replies} agent turns")
    table.add_column("metric")
    for report in reports:
        table.add_column(report.backend, justify="right")
    rows = [
        ("NLL / token (nats; dLLM: ELBO)", "nll_per_token", "{:.3f}"),
        ("perplexity", "perplexity", "{:.1f}"),
        ("BLEU", "bleu", "{:.2f}"),
        ("first piece p50 (ms)", "first_piece_ms_p50", "{:.1f}"),
        ("first piece p95 (ms)", "first_piece_ms_p95", "{:.1f}"),
        ("reply p50 (ms)", "reply_ms_p50", "{:.1f}"),
        ("reply p95 (ms)", "reply_ms_p95", "{:.1f}"),
        ("ms per token p50", "ms_per_token_p50", "{:.2f}"),
        ("tokens/s", "tokens_per_s", "{:.0f}"),
        ("reply tokens (mean)", "reply_tokens_mean", "{:.1f}"),
        ("tokens per step", "tokens_per_step_mean", "{:.2f}"),
        ("steps per block", "steps_per_block_mean", "{:.2f}"),
        ("ms per step p50", "ms_per_step_p50", "{:.2f}"),
    ]
    for label, key, style in rows:
        values = [getattr(r, key) for r in reports]
        table.add_row(label, *("—" if v is None else style.format(v) for v in values))
    for label, key in (
        ("tool calls: exact match", "call_exact_match"),
        ("tool calls: exact match, grounded", "call_exact_match_grounded"),
        ("tool calls: method right", "call_method_right"),
        ("called on call turns", "called_on_call_turns"),
        ("called instead of speaking", "called_instead_of_speaking"),
        ("replies with invented entities", "replies_with_hallucinated_entities"),
        ("replies with unfilled slots", "replies_with_unfilled_slots"),
        ("replies saying the caller's date or time", "replies_with_dates_or_times_said_back"),
    ):
        values = [r.tools[key] for r in reports]
        table.add_row(label, *("—" if v is None else f"{v:.1%}" for v in values))
    for kind in sorted({kind for r in reports for kind in r.lane}):
        values = [r.lane.get(kind) for r in reports]
        table.add_row(f"in lane: {kind}", *("—" if v is None else f"{v:.1%}" for v in values))
    Console().print(table)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "command": "cadence eval-lm",
            "corpus": str(corpus),
            "train_corpus": str(train_corpus) if train_corpus else None,
            "seen_services_only": seen_services_only,
            "dialogues": len(chosen),
            "agent_turns": replies,
            "threads": threads,
            "options": {
                "confidence_threshold": options.decoding.confidence_threshold,
                "first_emit_budget_ms": options.decoding.first_emit_budget_ms,
                "max_reply_tokens": options.decoding.max_reply_tokens,
                "history_turns": options.history_turns,
            },
            "backends": [r.to_dict() for r in reports],
        }
        write_report(json_out.parent, {json_out.name: payload})
