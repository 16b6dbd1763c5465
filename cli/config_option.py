"""The ``--config`` option every subcommand shares, and loading it with a clean exit."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from cadence.pipeline.config import CadenceConfig, ConfigError, load_config

EXIT_BAD_CONFIG = 2
"""Exit status of any command given an invalid configuration file."""

CONFIG_OPTION = typer.Option(
    None, "--config", "-c", help="YAML configuration; the built-in defaults if omitted."
)


def load_config_or_exit(path: Path | None) -> CadenceConfig:
    """Load ``path`` (defaults when ``None``); on problems print each and exit non-zero."""
    if path is None:
        return CadenceConfig()
    try:
        return load_config(path)
    except ConfigError as exc:
        err = Console(stderr=True, soft_wrap=True)
        err.print(f"[bold red]invalid configuration[/] {path}", highlight=False)
        for problem in exc.problems:
            err.print(f"  {problem}", highlight=False, markup=False)
        raise typer.Exit(EXIT_BAD_CONFIG) from exc
