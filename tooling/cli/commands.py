"""The lab's commands, added to the ``cadence`` command (``cli/app.py``) through the
``cadence.commands`` entry point of the ``cadence-lab`` distribution (``tooling/pyproject.toml``):
training and evaluating the models, the benches and load tests, the corpus builders, and a
conversation from clips."""

from __future__ import annotations

import typer

from cadence.tooling.cli import (
    adapter_cmd,
    bench_cmd,
    clips_cmd,
    converse_cmd,
    llm_cmd,
    loadtest_cmd,
    tools_cmd,
    turn_cmd,
)

PANEL = "Developing Cadence (cadence-lab)"
"""Where ``cadence --help`` lists the lab's commands, apart from the runtime's."""


def register(app: typer.Typer) -> None:
    """Add the lab's commands to ``app``."""
    app.command("train", rich_help_panel=PANEL)(llm_cmd.train_command)
    app.command("distil", rich_help_panel=PANEL)(llm_cmd.distil_command)
    app.command("generate", rich_help_panel=PANEL)(llm_cmd.generate_command)
    app.command("eval-lm", rich_help_panel=PANEL)(llm_cmd.eval_lm_command)
    app.command("bench", rich_help_panel=PANEL)(bench_cmd.bench)
    app.command("bench-voice", rich_help_panel=PANEL)(bench_cmd.bench_voice)
    app.command("bench-turns", rich_help_panel=PANEL)(bench_cmd.bench_turns)
    app.command("bench-tools", rich_help_panel=PANEL)(bench_cmd.bench_tools)
    app.command("bench-workers", rich_help_panel=PANEL)(loadtest_cmd.bench_workers)
    app.command("make-paused-clips", rich_help_panel=PANEL)(clips_cmd.make_paused_clips)
    app.command("make-turn-clips", rich_help_panel=PANEL)(clips_cmd.make_turn_clips)
    app.command("converse", rich_help_panel=PANEL)(converse_cmd.converse)
    app.command("loadtest", rich_help_panel=PANEL)(loadtest_cmd.loadtest)
    app.command("train-turn-model", rich_help_panel=PANEL)(turn_cmd.train_turn_model)
    app.command("calibrate-turn-lm", rich_help_panel=PANEL)(turn_cmd.calibrate_turn_lm)
    app.command("build-sgd-catalogue", rich_help_panel=PANEL)(tools_cmd.build_sgd_catalogue)
    app.command("eval-grounding", rich_help_panel=PANEL)(tools_cmd.eval_grounding)
    app.command("build-lane-corpus", rich_help_panel=PANEL)(tools_cmd.build_lane_corpus)
    app.command("build-lm-corpus", rich_help_panel=PANEL)(adapter_cmd.build_lm_corpus)
    app.command(
        "train-adapters",
        rich_help_panel=PANEL,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        add_help_option=False,
    )(adapter_cmd.train_adapters)
