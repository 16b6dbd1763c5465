"""``python -m cadence.tooling.bench.kernels``: the PyTorch references against the Triton kernels,
per kernel, per decode step and per reply, printed as a table.

On CPU only the references run, unless ``--interpreter``: then the Triton kernels run too, in
Triton's interpreter, which checks that they run end to end but says nothing about their speed
(the rows say so). On CUDA the rows are the reference, Triton, and the fixed-shape step
captured in a CUDA graph. Every figure is the median (and 90th percentile) of wall times in
milliseconds, each call synchronised with the device, as the decoder synchronises once per
step to read what it committed.

This is the one module of ``kernels`` that imports ``llm`` (the decode step needs the shipped
model); nothing imports it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Annotated

import torch
import typer
from rich.console import Console
from rich.table import Table

from cadence import kernels
from cadence.core.clock import MonotonicClock
from cadence.core.stats import median, percentile
from cadence.kernels.dispatch import Backend
from cadence.llm.block_diffusion import BlockDiffusionDecoder
from cadence.llm.checkpoint import load_model
from cadence.llm.decoding import DecodingOptions, ReplyStats
from cadence.llm.dialogue import Turn
from cadence.llm.graphed_decoder import GraphedBlockDiffusionDecoder
from cadence.report.files import write_report

INTERPRETER_CAPTION = (
    "Triton (interpreter) rows ran in Triton's interpreter on CPU: they show that the kernels"
    " run end to end, not how fast they are."
)
HISTORY = (
    "I would like to book a table for two in San Jose.",
    "Sure, what time would you like the table?",
    "At seven in the evening, please.",
)


@dataclass(frozen=True)
class Implementation:
    """One way to run the kernels: a dispatcher backend, optionally a captured graph."""

    label: str
    backend: Backend
    graph: bool = False

    def active(self) -> AbstractContextManager[None]:
        return kernels.use_backend(self.backend)


@dataclass(frozen=True)
class Row:
    measure: str
    implementation: Implementation
    shape: str
    times_ms: list[float]

    @property
    def median(self) -> float:
        return median(self.times_ms)

    @property
    def p90(self) -> float:
        return percentile(self.times_ms, 90)


def implementations(device: torch.device, interpreter: bool) -> list[Implementation]:
    reference = Implementation("reference", "reference")
    if device.type == "cuda":
        return [
            reference,
            Implementation("Triton", "triton"),
            Implementation("reference in a CUDA graph", "reference", graph=True),
            Implementation("Triton in a CUDA graph", "triton", graph=True),
        ]
    if interpreter:
        return [reference, Implementation("Triton (interpreter)", "triton")]
    return [reference]


def timed(call: Callable[[], object], device: torch.device, repeats: int) -> list[float]:
    """Wall milliseconds of ``repeats`` calls after two warm-up calls."""
    times = []
    for index in range(repeats + 2):
        start = time.perf_counter()
        call()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if index >= 2:
            times.append((time.perf_counter() - start) * 1000.0)
    return times


def kernel_rows(device: torch.device, chosen: list[Implementation], repeats: int) -> Iterator[Row]:
    """Each kernel alone, at the shipped model's shapes (block 8, vocabulary 4,096, 4 heads
    of 64), on a cache of 96 positions in a bucket of 128 and of 1,000 in 1,024."""
    generator = torch.Generator().manual_seed(0)
    logits = (torch.randn(1, 8, 4096, generator=generator) * 4).to(device)
    masked = torch.ones(1, 8, dtype=torch.bool, device=device)
    banned, ends = torch.tensor([1, 3, 4], device=device), torch.tensor([2, 0], device=device)
    commit = partial(kernels.commit_decision, logits, masked, torch.tensor([0.7]).to(device))
    for implementation in (i for i in chosen if not i.graph):
        with implementation.active():
            times = timed(partial(commit, banned, ends), device, repeats)
        yield Row("commit step", implementation, "1×8×4096", times)
    for valid, slots in ((96, 128), (1000, 1024)):
        q = torch.randn(1, 4, 8, 64, generator=generator).to(device)
        k, v = (torch.randn(1, 4, slots + 8, 64, generator=generator).to(device) for _ in "kv")
        attend = partial(kernels.block_attention, q, k, v, torch.tensor([valid]).to(device))
        for implementation in (i for i in chosen if not i.graph):
            with implementation.active():
                times = timed(attend, device, repeats)
            yield Row("block attention", implementation, f"4×64, {valid}/{slots} + 8", times)


def decode_rows(device: torch.device, chosen: list[Implementation], repeats: int) -> Iterator[Row]:
    """One decode step of the shipped model (forward + commit: a reply's first step on the
    prefilled conversation), then whole replies: their first piece and their end."""
    shipped = load_model("embedded:dllm")
    model, fmt = shipped.model.to(device), shipped.format
    history = [Turn("user" if i % 2 == 0 else "agent", t) for i, t in enumerate(HISTORY)]
    prompt = fmt.prompt(history, history_turns=3, max_context_tokens=128)
    variants = [("eager step", i, False) for i in chosen if not i.graph]
    variants += [("fixed-shape step", i, True) for i in chosen]
    for name, implementation, fixed in variants:
        clock, options = MonotonicClock(), DecodingOptions()
        decoder = (
            GraphedBlockDiffusionDecoder(model, fmt, options, clock, implementation.graph)
            if fixed
            else BlockDiffusionDecoder(model, fmt, options, clock)
        )
        with implementation.active():
            decoder.prefill(prompt[:-1])
            times = timed(partial(_first_step_of_reply, decoder), device, repeats)
            yield Row(name, implementation, f"8 over {len(decoder.cache.ids)}", times)
            firsts, wholes, tokens = [], [], 0
            for _ in range(max(3, repeats // 5)):
                stats = ReplyStats()
                list(decoder.decode(prompt, stats))
                firsts.append((stats.first_piece_ms or stats.end_ms) - stats.start_ms)
                wholes.append(stats.end_ms - stats.start_ms)
                tokens = len(stats.token_ids)
            yield Row(f"first piece ({name}s)", implementation, f"{tokens}-token reply", firsts)
            yield Row(f"whole reply ({name}s)", implementation, f"{tokens}-token reply", wholes)


def _first_step_of_reply(decoder: BlockDiffusionDecoder) -> list[bool]:
    """A reply's first step on the prefilled context, read back as the decoder reads it."""
    special = decoder.format.tokenizer.special
    block = [special.agent] + [special.mask] * (decoder.model.config.block_size - 1)
    masked = torch.tensor([False] + [True] * (len(block) - 1), device=decoder.device)
    decision, _ = decoder.step([], block, masked, None, lambda: 0.7)
    committed: list[bool] = decision.commit.tolist()
    return committed


COLUMNS = ("measure", "implementation", "shape", "median ms", "p90 ms", "runs")


def cells(row: Row) -> tuple[str, ...]:
    return (
        row.measure,
        row.implementation.label,
        row.shape,
        f"{row.median:.3f}",
        f"{row.p90:.3f}",
        str(len(row.times_ms)),
    )


def table(rows: list[Row], title: str, caption: str | None) -> Table:
    out = Table(title=title, caption=caption)
    for column in COLUMNS:
        out.add_column(column, justify="right" if column.endswith(("ms", "runs")) else "left")
    for row in rows:
        out.add_row(*cells(row))
    return out


def markdown(rows: list[Row], title: str, caption: str | None, command: str) -> str:
    lines = [f"# {title}", "", f"`{command}`", ""]
    lines += ["| " + " | ".join(COLUMNS) + " |", "|---" * len(COLUMNS) + "|"]
    lines += ["| " + " | ".join(cells(row)) + " |" for row in rows]
    return "\n".join([*lines, "", caption or ""]).rstrip() + "\n"


def main(
    device: Annotated[str, typer.Option(help="cpu, cuda, or auto (cuda where there is one)")] = (
        "auto"
    ),
    interpreter: Annotated[
        bool, typer.Option(help="on CPU, also run the Triton kernels in Triton's interpreter")
    ] = False,
    repeats: Annotated[int, typer.Option(min=3, help="timed calls per row")] = 50,
    threads: Annotated[int, typer.Option(min=1, help="CPU threads for PyTorch")] = 2,
    report: Annotated[Path | None, typer.Option(help="also write the table as Markdown")] = None,
) -> None:
    if interpreter:
        os.environ["TRITON_INTERPRET"] = "1"  # before the first kernel module is imported
    torch.set_num_threads(threads)
    chosen_device = torch.device(
        ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    )
    chosen = implementations(chosen_device, interpreter)
    where = (
        torch.cuda.get_device_name(chosen_device)
        if chosen_device.type == "cuda"
        else f"CPU, {threads} threads"
    )
    title = f"Kernels and decode step on {where}"
    with torch.inference_mode():  # the decoder's step is called directly, outside decode()
        rows = [*kernel_rows(chosen_device, chosen, repeats)]
        rows += decode_rows(chosen_device, chosen, repeats)
    caption = INTERPRETER_CAPTION if interpreter and chosen_device.type == "cpu" else None
    Console(width=120).print(table(rows, title, caption))
    if report is not None:
        command = " ".join(["python -m cadence.tooling.bench.kernels", *sys.argv[1:]])
        write_report(report.parent, {report.name: markdown(rows, title, caption, command)})


if __name__ == "__main__":
    typer.run(main)
