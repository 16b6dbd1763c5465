"""``cadence serve``: the browser demo, the Twilio endpoint and the Asterisk AudioSocket one.

The command line is the one place where ``pipeline/`` reaches up to ``web/``: it is the
composition root. ``web`` (aiortc, PyAV, websockets) is imported only when the command runs,
so the other commands start without it.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import typer
from pydantic import ValidationError
from rich.console import Console

from cadence.llm.checkpoint import CheckpointError
from cadence.pipeline.config import ServerConfig, TelephonyConfig
from cadence.tooling.cli.config_option import CONFIG_OPTION, EXIT_BAD_CONFIG, load_config_or_exit


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
    from cadence.web.access import AccessConfigError
    from cadence.web.server import serve_until_stopped

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

        # Each worker reports its own failure to start; the pool exits with 1 after it.
        raise typer.Exit(WorkerPool(settings, ready).run())
    try:
        asyncio.run(serve_until_stopped(settings, ready))
    except (CheckpointError, AccessConfigError) as exc:
        err.print(f"[bold red]error[/] {exc}", highlight=False)
        raise typer.Exit(EXIT_BAD_CONFIG) from exc
    except OSError as exc:
        where = f"{server.host}:{server.port}"
        if telephony.audiosocket:
            where += f" and {telephony.audiosocket}"
        err.print(f"[bold red]cannot listen on {where}[/] {exc}")
        raise typer.Exit(1) from exc
