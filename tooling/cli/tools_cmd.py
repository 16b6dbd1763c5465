"""``cadence build-sgd-catalogue``: the data of the offline SGD services (docs/tools.md)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

DATA_DIR = Path("../shared/data/dialogue")
DEFAULT_SERVICES = ("Restaurants_1", "Hotels_3", "Events_2", "Flights_1")
PACKAGED = Path("pipeline/tools/data/sgd_services.json.gz")


def build_sgd_catalogue(
    data_dir: Path = typer.Option(
        DATA_DIR, "--data", help="Folder of sgd_tools_*.jsonl and schemas_*.json."
    ),
    service: list[str] = typer.Option(
        list(DEFAULT_SERVICES), "--service", help="An SGD service to serve (repeatable)."
    ),
    out: Path = typer.Option(PACKAGED, "--out", help="The catalogue to write (.json.gz)."),
) -> None:
    """Collect the chosen SGD services' schemas and the rows their calls returned in the
    training and development dialogues (never the test ones) into the offline catalogue."""
    from cadence.tooling.training.sgd_catalogue import build_catalogue

    counts = build_catalogue(data_dir, service, out)
    console = Console(stderr=True)
    for method, rows in counts.items():
        console.print(f"{method}: {rows:,} rows")
    console.print(f"wrote {out} ({out.stat().st_size:,} bytes)")
