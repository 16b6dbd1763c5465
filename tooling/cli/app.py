"""Root of the ``cadence`` command: wires the subcommand modules together."""

from __future__ import annotations

import logging

import typer

from cadence.tooling.cli import (
    adapter_cmd,
    bench_cmd,
    config_cmd,
    converse_cmd,
    llm_cmd,
    loadtest_cmd,
    report_cmd,
    serve_cmd,
    tools_cmd,
    turn_cmd,
    voice_cmd,
)

app = typer.Typer(
    name="cadence",
    help="Cadence: a real-time voice agent with a block-diffusion turn generator.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(config_cmd.app, name="config")
app.command("train")(llm_cmd.train_command)
app.command("distil")(llm_cmd.distil_command)
app.command("generate")(llm_cmd.generate_command)
app.command("eval-lm")(llm_cmd.eval_lm_command)
app.command("transcribe")(voice_cmd.transcribe)
app.command("say")(voice_cmd.say)
app.command("bench")(bench_cmd.bench)
app.command("bench-voice")(bench_cmd.bench_voice)
app.command("bench-turns")(bench_cmd.bench_turns)
app.command("bench-tools")(bench_cmd.bench_tools)
app.command("bench-workers")(loadtest_cmd.bench_workers)
app.command("make-paused-clips")(bench_cmd.make_paused_clips)
app.command("converse")(converse_cmd.converse)
app.command("report")(report_cmd.report)
app.command("serve")(serve_cmd.serve)
app.command("loadtest")(loadtest_cmd.loadtest)
app.command("turn-score")(turn_cmd.turn_score)
app.command("train-turn-model")(turn_cmd.train_turn_model)
app.command("calibrate-turn-lm")(turn_cmd.calibrate_turn_lm)
app.command("build-sgd-catalogue")(tools_cmd.build_sgd_catalogue)
app.command("eval-grounding")(tools_cmd.eval_grounding)
app.command("build-lane-corpus")(tools_cmd.build_lane_corpus)
app.command("build-lm-corpus")(adapter_cmd.build_lm_corpus)
app.command(
    "train-adapters",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)(adapter_cmd.train_adapters)


@app.callback()
def _root(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log at DEBUG level."),
) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not verbose:
        # faster-whisper logs every decode at INFO; Cadence reports decodes itself.
        logging.getLogger("faster_whisper").setLevel(logging.WARNING)


def main() -> None:
    app()
