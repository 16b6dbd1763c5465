"""``cadence serve``: the browser demo, the Twilio endpoint and the Asterisk AudioSocket one.

The command line is the one place where ``pipeline/`` reaches up to ``web/``: it is the
composition root. ``web`` (aiortc, PyAV, websockets) is imported only when the command runs,
so the other commands start without it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import typer
from pydantic import ValidationError
from rich.console import Console

from cadence.cli.config_option import CONFIG_OPTION, EXIT_BAD_CONFIG, load_config_or_exit
from cadence.llm.checkpoint import CheckpointError
from cadence.pipeline.config import CadenceConfig, ServerConfig, TelephonyConfig


def serve(
    config: Path | None = CONFIG_OPTION,
    host: str | None = typer.Option(None, "--host", help="Interface to bind (server.host)."),
    port: int | None = typer.Option(None, "--port", help="TCP port (server.port)."),
    workers: int | None = typer.Option(
        None,
        "--workers",
        min=1,
        help="Worker processes on the one port, each with its own models and calls "
        "(server.workers; one per two cores).",
    ),
    audiosocket: str | None = typer.Option(
        None,
        "--audiosocket",
        metavar="HOST:PORT",
        help="Accept Asterisk AudioSocket calls here (telephony.audiosocket); no authentication: "
        "bind it where only Asterisk reaches it.",
    ),
) -> None:
    """Serve the browser demo: talk to the agent at the printed URL.

    One port serves the page, WebRTC signaling (/ws), Twilio Media Streams (/twilio), /healthz,
    /readyz and /metrics (Prometheus); with --audiosocket, a second one takes Asterisk's calls.
    SIGTERM drains (the calls in progress finish, server.drain_timeout_s at most); Ctrl-C
    closes at once.
    """
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        # Both log every HTTP request and every ICE candidate pair at INFO.
        for chatty in ("websockets.server", "aioice"):
            logging.getLogger(chatty).setLevel(logging.WARNING)
    settings = load_config_or_exit(config)
    err = Console(stderr=True, soft_wrap=True)
    options = (("host", host), ("port", port), ("workers", workers))
    overrides = {k: v for k, v in options if v is not None}
    try:
        server = ServerConfig.model_validate(settings.server.model_dump() | overrides)
        telephony = settings.telephony
        if audiosocket is not None:
            telephony = TelephonyConfig.model_validate(
                telephony.model_dump() | {"audiosocket": audiosocket}
            )
    except ValidationError as exc:
        err.print(f"[bold red]invalid option[/] {exc}", highlight=False)
        raise typer.Exit(EXIT_BAD_CONFIG) from exc
    settings = settings.model_copy(update={"server": server, "telephony": telephony})

    def ready(url: str) -> None:
        asterisk = f", AudioSocket on {telephony.audiosocket}" if telephony.audiosocket else ""
        typer.echo(f"Cadence demo at {url}{asterisk}  (Ctrl-C stops it)")

    if server.workers > 1:
        from cadence.web.workers import WorkerPool

        # Each worker runs `run_server`, which reports its own failure to start.
        raise typer.Exit(WorkerPool(settings, ready, run_server).run())
    raise typer.Exit(run_server(settings, ready))


def run_server(settings: CadenceConfig, on_ready: Callable[[str], None]) -> int:
    """One server process, until it is stopped; its exit status. A failure to start is told
    in one line that names what to fix: a model or secret the configuration lacks
    (``EXIT_BAD_CONFIG``), a port that cannot be bound (1). A worker of ``--workers`` runs
    this too."""
    from cadence.web.access import AccessConfigError
    from cadence.web.server import serve_until_stopped

    err = Console(stderr=True, soft_wrap=True)
    try:
        asyncio.run(serve_until_stopped(settings, on_ready))
    except (CheckpointError, AccessConfigError) as exc:
        err.print(f"[bold red]error[/] {exc}", highlight=False)
        return EXIT_BAD_CONFIG
    except OSError as exc:
        where = f"{settings.server.host}:{settings.server.port}"
        if settings.telephony.audiosocket:
            where += f" and {settings.telephony.audiosocket}"
        err.print(f"[bold red]cannot listen on {where}[/] {exc}")
        return 1
    return 0
