"""``cadence config check|show``: validate and print configurations."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from cadence.cli.config_option import load_config_or_exit
from cadence.pipeline.config import render_config, render_defaults

app = typer.Typer(help="Validate and print configurations.", no_args_is_help=True)


@app.command()
def check(file: Path = typer.Argument(..., help="YAML configuration to validate.")) -> None:
    """Validate FILE; print every problem with its line, or OK."""
    load_config_or_exit(file)
    Console().print(f"[green]OK[/] {file}", highlight=False)


@app.command()
def show(
    file: Path | None = typer.Argument(None, help="Configuration to resolve."),
    defaults: bool = typer.Option(False, "--defaults", help="Print the built-in defaults."),
) -> None:
    """Print the effective configuration (FILE merged over the defaults) as commented YAML."""
    if defaults == (file is not None):
        raise typer.BadParameter("give either FILE or --defaults")
    text = render_defaults() if file is None else render_config(load_config_or_exit(file))
    typer.echo(text, nl=False)
