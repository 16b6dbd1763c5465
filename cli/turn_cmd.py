"""``cadence turn-score``: P(the turn is complete) of each utterance, as the configured
end-of-turn model (``turn.end_of_turn.model``) gives it — what a deployment checks its end of
turn with. Training and calibrating those models is the lab's (``tooling/cli/turn_cmd.py``)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

import typer
from rich.console import Console

from cadence.cli.config_option import CONFIG_OPTION, load_config_or_exit
from cadence.llm.pretrained import PretrainedModelError
from cadence.pipeline.config import CadenceConfig
from cadence.pipeline.end_of_turn import EndOfTurnDetector
from cadence.voice.turn import TextEndOfTurnModel, TextEndOfTurnModelError

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
    """The configured end of turn's P(complete) of an utterance after the agent's words — the
    engine's own detector, digits counted and all."""
    options = settings.turn.end_of_turn
    if weights is not None:
        options = options.model_copy(update={"model": "text"})
    text_model = TextEndOfTurnModel.load(weights) if options.model == "text" else None
    lm = None
    if options.model == "lm":
        from cadence.pipeline.model_loading import apply_thread_budget, load_turn_end_model

        apply_thread_budget(settings.threads)  # one thread: a second one only waits (cpu_linear)
        lm = load_turn_end_model(settings.models.lm)
    detector = EndOfTurnDetector(options, text_model, lm)
    return lambda text, agent: asyncio.run(detector.probability(text, agent_text=agent))
