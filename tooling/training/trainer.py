"""``cadence train``: trains the AR baseline or the block-diffusion model, resumably.

Every few minutes the whole training state (weights, optimizer, position in the epoch) is
written atomically to ``OUT/checkpoint.pt``; started again with the same ``OUT``, training
continues from there. Each epoch's windows and batch order come from ``seed + epoch`` and each
step's noise from ``seed`` and the step number, so a resumed run sees the data a continuous
run would have seen.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import torch

from cadence.llm.checkpoint import (
    load_model,
    model_from_payload,
    model_payload,
    save_atomically,
    save_model,
)
from cadence.llm.dialogue_format import DialogueFormat, TokenWindow
from cadence.llm.model import AttentionMode, ModelConfig, Transformer
from cadence.llm.tokenizer import DialogueTokenizer
from cadence.tooling.training.corpus import has_tool_turns, read_dialogues
from cadence.tooling.training.objectives import (
    Batch,
    LossResult,
    autoregressive_loss,
    block_diffusion_loss,
    collate,
)

Objective = Literal["bd3", "ar"]
TRAINING_STATE = "checkpoint.pt"
"""Resumable training state inside the output folder."""
FINAL_MODEL = "model.pt"
"""Compact fp16 model written when training ends (what gets shipped)."""
LOG = "log.jsonl"


@dataclass(frozen=True)
class TrainOptions:
    objective: Objective
    corpora: tuple[Path, ...]
    """Training dialogues (JSONL)."""
    validation: Path | None
    """Dialogues for the validation loss; never trained on."""
    out_dir: Path
    init: Path | None = None
    """Start from this checkpoint's weights and tokenizer (e.g. the AR model for bd3)."""
    epochs: float = 1.0
    """Length of the learning-rate schedule; training ends there."""
    max_minutes: float | None = None
    """Stop (resumably) after this much training time in this invocation."""
    tokens_per_batch: int = 4096
    learning_rate: float = 1e-3
    warmup_steps: int = 100
    weight_decay: float = 0.1
    checkpoint_minutes: float = 3.0
    seed: int = 0
    vocab_size: int = 4096
    block_size: int = 8
    max_turn_tokens: int = 40
    window_tokens: int = 192
    window_turns: int = 6
    d_model: int = 256
    n_layers: int = 6
    n_heads: int = 4
    ffn_hidden: int = 704
    noise_range: tuple[float, float] = (0.3, 1.0)
    """Per-block mask rates for bd3 (clipped schedule)."""
    validation_dialogues: int = 100
    dialogue_limit: int | None = None
    """Read only this many dialogues per corpus (tests, quick runs)."""
    threads: int | None = None


@dataclass
class TrainProgress:
    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    tokens_seen: int = 0
    train_seconds: float = 0.0
    history: list[dict[str, Any]] = field(default_factory=list)


ProgressCallback = Callable[[TrainProgress, float, float, int], None]
"""Called after each step with (progress, loss, tokens/s, total steps)."""


def train(options: TrainOptions, on_step: ProgressCallback | None = None) -> TrainProgress:
    """Train until the schedule ends or ``max_minutes`` pass; return where it stopped."""
    if options.threads:
        torch.set_num_threads(options.threads)
    state_path = options.out_dir / TRAINING_STATE
    resumed = torch.load(state_path, weights_only=True) if state_path.exists() else None
    corpus = [d for path in options.corpora for d in read_dialogues(path, options.dialogue_limit)]
    model, fmt = _initial_model(options, resumed, tools=has_tool_turns(corpus))
    dialogues = [fmt.encode_turns(d.turns) for d in corpus]
    validation = _validation_batches(options, fmt)
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=options.learning_rate,
        betas=(0.9, 0.95),
        weight_decay=options.weight_decay,
    )
    progress = TrainProgress()
    if resumed is not None:
        optimizer.load_state_dict(resumed["optimizer"])
        progress = TrainProgress(**resumed["progress"])
    steps_per_epoch = len(_epoch_batches(dialogues, fmt, options, 0))
    total_steps = max(1, math.ceil(options.epochs * steps_per_epoch))
    loss_fn = loss_function(options.objective, fmt, options.noise_range)

    started = time.monotonic()
    last_save = started
    model.train()
    while progress.step < total_steps:
        batches = _epoch_batches(dialogues, fmt, options, progress.epoch)
        for index in range(progress.batch_in_epoch, len(batches)):
            if progress.step >= total_steps:
                break
            step_start = time.monotonic()
            for group in optimizer.param_groups:
                group["lr"] = _learning_rate(options, progress.step, total_steps)
            torch.manual_seed(options.seed * 1_000_003 + progress.step)
            batch = collate(batches[index], fmt.tokenizer.special.pad)
            result = loss_fn(model, batch)
            optimizer.zero_grad(set_to_none=True)
            torch.autograd.backward(result.loss)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            elapsed = time.monotonic() - step_start
            tokens = int(batch.lengths.sum())
            progress.step += 1
            progress.batch_in_epoch = index + 1
            progress.tokens_seen += tokens
            progress.train_seconds += elapsed
            if on_step is not None:
                on_step(progress, float(result.loss.detach()), tokens / elapsed, total_steps)
            now = time.monotonic()
            out_of_time = (
                options.max_minutes is not None and now - started >= options.max_minutes * 60
            )
            if now - last_save >= options.checkpoint_minutes * 60 or out_of_time:
                _record(
                    progress,
                    steps_per_epoch,
                    model,
                    validation,
                    loss_fn,
                    float(result.loss.detach()),
                )
                _save_state(options, model, fmt, optimizer, progress)
                last_save = now
            if out_of_time:
                return progress
        else:
            progress.epoch += 1
            progress.batch_in_epoch = 0
    _record(progress, steps_per_epoch, model, validation, loss_fn, None)
    _save_state(options, model, fmt, optimizer, progress)
    save_model(options.out_dir / FINAL_MODEL, model, fmt, _metadata(options, progress))
    return progress


def evaluate_loss(
    model: Transformer,
    batches: Sequence[Batch],
    loss_fn: Callable[[Transformer, Batch], LossResult],
) -> float:
    """Mean NLL per agent token (nats) over ``batches``; the ELBO bound for bd3."""
    was_training = model.training
    model.eval()
    nll, tokens = 0.0, 0
    with torch.no_grad():
        for batch in batches:
            result = loss_fn(model, batch)
            nll += result.nll_sum
            tokens += result.tokens
    model.train(was_training)
    return nll / max(tokens, 1)


def loss_function(
    objective: Objective, fmt: DialogueFormat, noise_range: tuple[float, float]
) -> Callable[[Transformer, Batch], LossResult]:
    if objective == "ar":
        return autoregressive_loss
    mask_id = fmt.tokenizer.special.mask
    return lambda model, batch: block_diffusion_loss(model, batch, mask_id, noise_range)


def windows_to_batches(
    windows: list[TokenWindow], tokens_per_batch: int, rng: random.Random
) -> list[list[TokenWindow]]:
    """Groups windows of similar length (little padding) into batches of about
    ``tokens_per_batch`` padded tokens, in random order."""
    windows = sorted(windows, key=lambda w: (len(w.ids), rng.random()))
    batches: list[list[TokenWindow]] = []
    current: list[TokenWindow] = []
    for window in windows:
        if current and len(window.ids) * (len(current) + 1) > tokens_per_batch:
            batches.append(current)
            current = []
        current.append(window)
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


def _initial_model(
    options: TrainOptions, resumed: dict[str, Any] | None, tools: bool
) -> tuple[Transformer, DialogueFormat]:
    """The model and format to start from: the resumed run's, the ``init`` checkpoint's, or
    new ones. A corpus with tool calls needs the tool tokens: a tokenizer without them gets
    them, and the model two more embedding rows."""
    attention: AttentionMode = "causal" if options.objective == "ar" else "block_causal"
    if resumed is not None:
        loaded = model_from_payload(resumed["model"])
        return loaded.model, loaded.format
    torch.manual_seed(options.seed)
    if options.init is not None:
        loaded = load_model(options.init)
        tokenizer = loaded.tokenizer.with_tool_tokens() if tools else loaded.tokenizer
        config = replace(loaded.model.config, attention=attention, vocab_size=tokenizer.vocab_size)
        model = Transformer(config)
        model.load_state_dict(_grown(loaded.model.state_dict(), tokenizer.vocab_size))
        return model, DialogueFormat(tokenizer, config.block_size, options.max_turn_tokens)
    texts = (
        turn.text
        for corpus in options.corpora
        for d in read_dialogues(corpus, options.dialogue_limit)
        for turn in d.turns
    )
    tokenizer = DialogueTokenizer.train(texts, options.vocab_size)
    tokenizer = tokenizer.with_tool_tokens() if tools else tokenizer
    config = ModelConfig(
        vocab_size=tokenizer.vocab_size,
        attention=attention,
        block_size=options.block_size,
        d_model=options.d_model,
        n_layers=options.n_layers,
        n_heads=options.n_heads,
        ffn_hidden=options.ffn_hidden,
    )
    return Transformer(config), DialogueFormat(
        tokenizer, options.block_size, options.max_turn_tokens
    )


def _grown(state: dict[str, torch.Tensor], vocab_size: int) -> dict[str, torch.Tensor]:
    """``state`` with its (tied) embedding grown to ``vocab_size`` rows, each new row the
    mean of the old ones: a new token starts as an average word, not as noise."""
    embedding = state["embedding.weight"]
    extra = vocab_size - embedding.shape[0]
    if extra <= 0:
        return state
    mean = embedding.float().mean(0, keepdim=True).to(embedding.dtype)
    return {**state, "embedding.weight": torch.cat([embedding, mean.expand(extra, -1)])}


def _epoch_batches(
    dialogues: list[list[list[int]]], fmt: DialogueFormat, options: TrainOptions, epoch: int
) -> list[list[TokenWindow]]:
    rng = random.Random(options.seed * 7919 + epoch)
    windows = [
        window
        for turns in dialogues
        for window in fmt.windows(turns, options.window_tokens, options.window_turns, rng)
    ]
    return windows_to_batches(windows, options.tokens_per_batch, rng)


def _validation_batches(options: TrainOptions, fmt: DialogueFormat) -> list[Batch]:
    if options.validation is None:
        return []
    rng = random.Random(options.seed)
    windows = [
        window
        for d in read_dialogues(options.validation, options.validation_dialogues)
        for window in fmt.windows(
            fmt.encode_turns(d.turns), options.window_tokens, options.window_turns, rng
        )
    ]
    return [
        collate(batch, fmt.tokenizer.special.pad)
        for batch in windows_to_batches(windows, options.tokens_per_batch, rng)
    ]


def _learning_rate(options: TrainOptions, step: int, total_steps: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < options.warmup_steps:
        return options.learning_rate * (step + 1) / options.warmup_steps
    done = (step - options.warmup_steps) / max(1, total_steps - options.warmup_steps)
    return options.learning_rate * (0.1 + 0.45 * (1 + math.cos(math.pi * min(done, 1.0))))


def _record(
    progress: TrainProgress,
    steps_per_epoch: int,
    model: Transformer,
    validation: list[Batch],
    loss_fn: Callable[[Transformer, Batch], LossResult],
    train_loss: float | None,
) -> None:
    torch.manual_seed(0)  # the same noise for every validation of a bd3 run
    entry: dict[str, Any] = {
        "step": progress.step,
        "epoch": round(progress.epoch + progress.batch_in_epoch / steps_per_epoch, 3),
        "tokens_seen": progress.tokens_seen,
        "train_seconds": round(progress.train_seconds, 1),
        "train_loss": train_loss,
    }
    if validation:
        entry["validation_nll"] = evaluate_loss(model, validation, loss_fn)
    progress.history.append(entry)


def _save_state(
    options: TrainOptions,
    model: Transformer,
    fmt: DialogueFormat,
    optimizer: torch.optim.Optimizer,
    progress: TrainProgress,
) -> None:
    save_atomically(
        options.out_dir / TRAINING_STATE,
        {
            "model": model_payload(model, fmt, _metadata(options, progress), torch.float32),
            "optimizer": optimizer.state_dict(),
            "progress": asdict(progress),
        },
    )
    with (options.out_dir / LOG).open("a", encoding="utf-8") as log:
        log.write(json.dumps(progress.history[-1]) + "\n")


def _metadata(options: TrainOptions, progress: TrainProgress) -> dict[str, Any]:
    return {
        "objective": options.objective,
        "init": str(options.init) if options.init else None,
        "corpora": [p.name for p in options.corpora],
        "epochs": options.epochs,
        "steps": progress.step,
        "tokens_seen": progress.tokens_seen,
        "train_seconds": round(progress.train_seconds, 1),
        "seed": options.seed,
        "noise_range": list(options.noise_range),
        "history": progress.history,
    }
