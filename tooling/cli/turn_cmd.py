"""``cadence train-turn-model`` (the hashed text end-of-turn model) and ``cadence
calibrate-turn-lm`` (the language model's calibration): the end-of-turn models made, where
``cadence turn-score`` (``cli/turn_cmd.py``) only uses them."""

from __future__ import annotations

import shlex
from pathlib import Path

import typer
from rich.console import Console

from cadence.cli.config_option import CONFIG_OPTION, load_config_or_exit
from cadence.cli.turn_cmd import EXIT_BAD_INPUT

DATA_DIR = Path("../shared/data/dialogue")
DEFAULT_CORPORA = ("sgd_train", "taskmaster4", "woz2", "camrest676")


def train_turn_model(
    ctx: typer.Context,
    data: Path = typer.Option(DATA_DIR, "--data", help="Folder of the JSONL dialogue corpora."),
    out: Path = typer.Option(..., "--out", help="The weights file to write (.npz)."),
    metrics: Path | None = typer.Option(
        None, "--metrics", help="The metrics JSON to write; OUT with .metrics.json if omitted."
    ),
    corpus: list[str] = typer.Option(
        list(DEFAULT_CORPORA), "--corpus", help="Training corpus name or path (repeatable)."
    ),
    validation: str = typer.Option(
        "sgd_dev", "--validation", help="Held-out corpus: the best epoch and the threshold."
    ),
    test: str | None = typer.Option(
        "sgd_test", "--test", help="Evaluation-only corpus, scored once at the end ('' for none)."
    ),
    dim_bits: int = typer.Option(18, "--dim-bits", help="Hashed features: 2^N weights."),
    epochs: int = typer.Option(3, "--epochs", help="Passes over the training examples."),
    learning_rate: float = typer.Option(0.003, "--lr", help="Adam's learning rate."),
    max_dialogues: int | None = typer.Option(
        None, "--max-dialogues", help="Only the first N dialogues of each corpus (quick runs)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the examples, noise and order."),
    threads: int = typer.Option(1, "--threads", help="Torch CPU threads."),
) -> None:
    """Train the text end-of-turn model, tune its threshold, write its weights and metrics."""
    from cadence.tooling.training.end_of_turn import train_turn_model
    from cadence.tooling.training.end_of_turn_options import TurnModelOptions

    err = Console(stderr=True, soft_wrap=True)
    paths = [_corpus_path(data, name) for name in corpus]
    validation_path = _corpus_path(data, validation)
    test_path = _corpus_path(data, test) if test else None
    for path in [*paths, validation_path, *([test_path] if test_path else [])]:
        if not path.is_file():
            err.print(f"[red]error[/] no corpus {path}", highlight=False)
            raise typer.Exit(EXIT_BAD_INPUT)
    options = TurnModelOptions(
        corpora=tuple(paths),
        validation=validation_path,
        out=out,
        test=test_path,
        metrics=metrics,
        dim=1 << dim_bits,
        epochs=epochs,
        learning_rate=learning_rate,
        seed=seed,
        threads=threads,
        max_dialogues=max_dialogues,
        command=_command_line(ctx),
    )
    report = train_turn_model(options, lambda line: err.print(line, highlight=False, markup=False))
    typer.echo(f"{out}\tthreshold {report.threshold:.3f}")


def _command_line(ctx: typer.Context) -> str:
    """The command as given (the options set on the command line, in a fixed order), for the
    metrics to say how they were made."""
    words = ["cadence", "train-turn-model"]
    for param in ctx.command.params:
        name = param.name or ""
        source = ctx.get_parameter_source(name)
        if source is None or source.name != "COMMANDLINE":
            continue
        flag = param.opts[0]
        value = ctx.params[name]
        for item in value if isinstance(value, list | tuple) else [value]:
            words += [flag, str(item)]
    return shlex.join(words)


def _corpus_path(data_dir: Path, name: str) -> Path:
    path = Path(name)
    return path if path.suffix == ".jsonl" else data_dir / f"{name}.jsonl"


def calibrate_turn_lm(
    data: Path = typer.Option(DATA_DIR, "--data", help="Folder of the JSONL dialogue corpora."),
    out: Path = typer.Option(..., "--out", help="The calibration JSON to write."),
    metrics: Path | None = typer.Option(None, "--metrics", help="The metrics JSON to write."),
    validation: str = typer.Option("sgd_dev", "--validation", help="The corpus fit on."),
    test: str | None = typer.Option(
        "sgd_test", "--test", help="Evaluation-only corpus, scored once at the end ('' for none)."
    ),
    max_dialogues: int | None = typer.Option(
        400, "--max-dialogues", help="The first N dialogues of each corpus."
    ),
    threshold: float = typer.Option(0.9, "--threshold", help="P(complete) reported at."),
    cache_dir: Path | None = typer.Option(
        None, "--cache-dir", help="Keep the raw scores here, to refit without rescoring."
    ),
    config: Path | None = CONFIG_OPTION,
) -> None:
    """Fit the language model's end-of-turn calibration on a dialogue corpus; report both."""
    from cadence.pipeline.model_loading import apply_thread_budget, load_turn_end_model
    from cadence.tooling.training.turn_end_lm import CalibrationRun
    from cadence.tooling.training.turn_end_lm import calibrate_turn_lm as calibrate

    err = Console(stderr=True, soft_wrap=True)
    settings = load_config_or_exit(config)
    apply_thread_budget(settings.threads)
    model = load_turn_end_model(settings.models.lm)
    run = CalibrationRun(
        validation=_corpus_path(data, validation),
        out=out,
        test=_corpus_path(data, test) if test else None,
        metrics=metrics,
        max_dialogues=max_dialogues,
        threshold=threshold,
        cache_dir=cache_dir,
    )
    calibrate(model, run, lambda line: err.print(line, highlight=False, markup=False))
    typer.echo(str(out))
