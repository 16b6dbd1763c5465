"""The ``cadence`` command: what a deployment runs — ``serve``, ``prepare``, ``config``,
``say``, ``transcribe``, ``turn-score`` and ``report`` — and the commands installed beside it.

The lab (benches, load tests, training, evaluation, corpus builders, emulators: ``tooling/``,
the ``cadence-lab`` distribution) is not in the runtime wheel, so a deployment carries none of
it. It adds its commands to this one through the ``cadence.commands`` entry-point group: each
entry point names a function that takes the ``typer.Typer`` and registers its commands. One
``cadence`` command then shows both, as it does in a development checkout (``make``
installs both); without the lab, ``cadence --help`` lists the runtime's six.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from importlib.metadata import EntryPoint, entry_points

import typer

from cadence.cli import config_cmd, prepare_cmd, report_cmd, serve_cmd, turn_cmd, voice_cmd

COMMANDS_GROUP = "cadence.commands"
"""The entry-point group through which another distribution adds commands."""

RUNTIME_COMMANDS = ("config", "serve", "say", "transcribe", "turn-score", "report")

log = logging.getLogger(__name__)


def build_app(plugins: Iterable[EntryPoint] | None = None) -> typer.Typer:
    """The ``cadence`` command with the runtime's commands and those of ``plugins`` (the
    installed ``cadence.commands`` entry points when ``None``).

    A plugin that cannot be loaded costs only its own commands: it is logged with its reason,
    and the runtime's commands still work."""
    app = typer.Typer(
        name="cadence",
        help="Cadence: a real-time voice agent with a block-diffusion turn generator.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.add_typer(config_cmd.app, name="config")
    app.command("serve")(serve_cmd.serve)
    app.command("prepare")(prepare_cmd.prepare)
    app.command("say")(voice_cmd.say)
    app.command("transcribe")(voice_cmd.transcribe)
    app.command("turn-score")(turn_cmd.turn_score)
    app.command("report")(report_cmd.report)
    app.callback()(_root)
    for plugin in entry_points(group=COMMANDS_GROUP) if plugins is None else plugins:
        try:
            register: Callable[[typer.Typer], None] = plugin.load()
            register(app)
        except Exception as exc:  # a broken plugin must not take the runtime's commands
            log.warning("cadence: the commands of %s are unavailable: %r", plugin.value, exc)
    return app


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


app = build_app()


def main() -> None:
    app()
