"""``cadence turn-score`` (P(complete) with the configured end-of-turn model), ``cadence
train-turn-model`` (the hashed text model) and ``cadence calibrate-turn-lm`` (the language
model's calibration)."""

from __future__ import annotations

import asyncio
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import typer
from rich.console import Console

from cadence.llm.pretrained import PretrainedModelError
from cadence.pipeline.config import CadenceConfig
from cadence.pipeline.end_of_turn import EndOfTurnDetector
from cadence.tooling.cli.config_option import CONFIG_OPTION, load_config_or_exit
from cadence.voice.turn import TextEndOfTurnModel, TextEndOfTurnModelError

DATA_DIR = Path("../shared/data/dialogue")
DEFAULT_CORPORA = ("sgd_train", "taskmaster4", "woz2", "camrest676")
EXIT_BAD_INPUT = 3
"""Exit status when the input file or the weights file cannot be used."""


def turn_score(
    file: str = typer.Argument(
        "-", help="Utterances, one a line; `-` or nothing for standard input."
    ),
    agent: str | None = typer.Option(
        None, "--agent", help="The agent's turn before each utterance (the same for all)."
    ),
    weights: Path | None = typer.Option(
        None, "--weights", help="With the `text` model: a weights file of `train-turn-model`."
    ),
    config: Path | None = CONFIG_OPTION,
) -> None:
    """Write `P<TAB>utterance` for each line: P the probability that it is a complete turn, as
    the configuration's `turn.end_of_turn.model` gives it."""
    err = Console(stderr=True, soft_wrap=True)
    settings = load_config_or_exit(config)
    try:
        score = _scorer(settings, weights)
    except (TextEndOfTurnModelError, PretrainedModelError) as exc:
        err.print(f"[red]error[/] {exc}", highlight=False, markup=True)
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    if file == "-":
        lines = sys.stdin.read().splitlines()
    else:
        try:
            lines = Path(file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            err.print(f"[red]error[/] cannot read {file}: {exc}", highlight=False)
            raise typer.Exit(EXIT_BAD_INPUT) from exc
    for line in lines:
        utterance = line.rstrip("\r")
        typer.echo(f"{score(utterance, agent):.3f}\t{utterance}")


def _scorer(settings: CadenceConfig, weights: Path | None) -> Callable[[str, str | None], float]:
    """The configured model's P(complete) of an utterance after the agent's words."""
    model = settings.turn.end_of_turn.model
    if model == "text" or weights is not None:
        text_model = TextEndOfTurnModel.load(weights)
        return lambda text, agent: text_model.score(text, agent_text=agent)
    if model == "lm":
        from cadence.pipeline.model_loading import apply_thread_budget, load_turn_end_model

        apply_thread_budget(settings.threads)  # one thread: a second one only waits (cpu_linear)
        session = load_turn_end_model(settings.models.lm).session()
        return session.probability
    detector = EndOfTurnDetector(settings.turn.end_of_turn)
    return lambda text, agent: asyncio.run(detector.probability(text, agent_text=agent))


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
    from cadence.tooling.training.end_of_turn import TurnModelOptions, train_turn_model

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
