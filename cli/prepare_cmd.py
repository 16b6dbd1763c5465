"""``cadence prepare``: everything a configuration needs made ready before the first call.

Most models load as they are (pip's wheels, the repository's files); the language model's int8
graph is built once from them (``llm/engine/``, about a minute) and kept in the cache folder.
``make`` and the container image's build run this so that the first start — and the first
call — does not pay for it; without it, the first start builds the graph and logs that it does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import typer

from cadence.cli.config_option import CONFIG_OPTION, load_config_or_exit
from cadence.llm.checkpoint import CheckpointError
from cadence.llm.engine import engine_dir

EXIT_MODEL = 3


def prepare(config: Path | None = CONFIG_OPTION) -> None:
    """Load every model the configuration (and its overlays) names, building what is built
    once (the language model's int8 graph, into the cache folder), then exit."""
    from cadence.pipeline.agent import Agent

    if logging.getLogger().getEffectiveLevel() > logging.INFO:
        logging.getLogger("cadence").setLevel(logging.INFO)  # say when a graph is built
    settings = load_config_or_exit(config)
    started = time.monotonic()
    try:
        asyncio.run(Agent(settings).load())
    except CheckpointError as exc:
        typer.echo(f"cadence prepare: {exc}", err=True)
        raise typer.Exit(EXIT_MODEL) from None
    typer.echo(f"ready in {time.monotonic() - started:.0f} s (built graphs in {engine_dir()})")
