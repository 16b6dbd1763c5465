"""``cadence train-turn-model``: the text end-of-turn model, trained and evaluated on the
dialogue corpora — the run that ties the steps together.

The steps are modules of their own: the examples (``end_of_turn_examples``) with the
augmentation's noise (``end_of_turn_noise``), the logistic regression (``end_of_turn_fit``),
and the held-out figures (``end_of_turn_evaluation``). This one orders them, because the order
is what makes a run reproducible: every random draw comes from a generator seeded off
``options.seed`` here, so the same command writes the same file. The model is exported as
float16 numpy weights that the runtime reads without torch. The decision threshold is tuned on
the validation corpus (sgd_dev), never on the test corpus, which is only scored once
everything is fixed; the metrics JSON says how the weights were made and what they scored.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cadence.report.files import write_report
from cadence.tooling.training.end_of_turn_evaluation import (
    choose_threshold,
    score_examples,
    summarize,
    time_per_score,
)
from cadence.tooling.training.end_of_turn_examples import (
    UserTurn,
    evaluation_examples,
    training_examples,
    user_turns,
    whole_turns,
)
from cadence.tooling.training.end_of_turn_fit import encode, fit
from cadence.tooling.training.end_of_turn_noise import Noise
from cadence.tooling.training.end_of_turn_options import TurnModelOptions
from cadence.voice.turn.features import words_of
from cadence.voice.turn.text_model import TextEndOfTurnModel, save_weights


@dataclass
class TurnModelReport:
    threshold: float
    metrics: dict[str, Any]
    history: list[dict[str, float]] = field(default_factory=list)


def train_turn_model(
    options: TurnModelOptions, log: Callable[[str], None] = lambda _: None
) -> TurnModelReport:
    """Build the examples, train, tune the threshold on the validation corpus, write the
    weights, score the test corpus once, and write the metrics JSON."""
    if options.dim < 2 or options.dim & (options.dim - 1):
        raise ValueError(f"dim must be a power of two, not {options.dim}")
    torch.set_num_threads(options.threads)
    rng = random.Random(options.seed)
    started = time.monotonic()

    train_turns = [t for path in options.corpora for t in user_turns(path, options.max_dialogues)]
    known = whole_turns(train_turns)
    vocabulary = _vocabulary(train_turns, rng)
    train_examples = training_examples(train_turns, known, options, rng, vocabulary)
    rng.shuffle(train_examples)
    val_turns = user_turns(options.validation, options.max_dialogues)
    # The loss that picks the epoch is taken on clean validation utterances.
    val_examples = evaluation_examples(val_turns, known, random.Random(options.seed + 1))
    log(
        f"{len(train_turns):,} training turns → {len(train_examples):,} examples "
        f"({Counter(e.kind for e in train_examples)}); {len(val_examples):,} validation"
    )
    train_data = encode(train_examples, options.dim)
    val_data = encode(val_examples, options.dim)
    log(f"encoded in {time.monotonic() - started:.0f} s")

    weights, bias, history = fit(
        train_data,
        val_data,
        options,
        lambda r: log(
            f"epoch {r['epoch']:.0f}: train loss {r['train_loss']:.4f}, "
            f"validation loss {r['val_loss']:.4f}"
        ),
    )
    # The threshold is tuned on the exported (float16) model, through the runtime path.
    provisional = TextEndOfTurnModel(weights.astype(np.float16).astype(np.float32), bias, 0.5)
    val_scores = score_examples(provisional, val_examples)
    # Tuned on the utterances whose label is not in doubt: prefixes that are complete
    # sentences (``sentence_end``, ``whole_turn``) would push it up for every complete turn.
    clear = np.asarray([e.kind in ("complete", "mid") for e in val_examples])
    labels = np.asarray([e.label for e in val_examples])
    threshold = choose_threshold(val_scores[clear], labels[clear])
    log(f"threshold {threshold:.3f} (tuned on {options.validation.stem})")

    noise_rng = random.Random(options.seed + 2)
    noise = Noise(options.augmentation, noise_rng, vocabulary)
    val_noisy = evaluation_examples(val_turns, known, noise_rng, noise)
    fp32 = TextEndOfTurnModel(weights, bias, threshold)
    metrics: dict[str, Any] = {
        "command": options.command,
        "threshold": threshold,
        "threshold_rule": (
            "the largest margin over the weaker target (incomplete ≥ 95 %, complete ≥ 92 %) "
            f"on {options.validation.stem}, clean, complete turns and mid-sentence prefixes"
        ),
        "training": {
            "corpora": [p.stem for p in options.corpora],
            "validation": options.validation.stem,
            "turns": len(train_turns),
            "examples": dict(Counter(e.kind for e in train_examples)),
            "options": _jsonable_options(options),
            "history": history,
            "seconds": round(time.monotonic() - started, 1),
        },
        "weights": {"dim": options.dim, "dtype": "float16"},
        "validation": {
            "clean": summarize(val_scores, val_examples, threshold),
            "noisy": summarize(score_examples(provisional, val_noisy), val_noisy, threshold),
            "float16_vs_float32_decisions_differ": round(
                float(
                    np.mean(
                        (score_examples(fp32, val_examples) >= threshold)
                        != (val_scores >= threshold)
                    )
                ),
                5,
            ),
        },
    }
    save_weights(options.out, weights, bias, threshold, _metadata(metrics))
    model = TextEndOfTurnModel.load(options.out)
    metrics["weights"]["bytes"] = options.out.stat().st_size
    metrics["time_per_score"] = time_per_score(model, val_examples[: options.latency_samples])

    if options.test is not None:
        test_turns = user_turns(options.test)
        test_rng = random.Random(options.seed + 3)
        test_clean = evaluation_examples(test_turns, known, test_rng)
        test_noise = Noise(options.augmentation, random.Random(options.seed + 4), vocabulary)
        test_noisy = evaluation_examples(test_turns, known, test_noise.rng, test_noise)
        metrics["test"] = {
            "corpus": options.test.stem,
            "clean": summarize(score_examples(model, test_clean), test_clean, threshold),
            "noisy": summarize(score_examples(model, test_noisy), test_noisy, threshold),
        }
        log(f"test ({options.test.stem}) clean: {_headline(metrics['test']['clean'])}")
    log(f"validation clean: {_headline(metrics['validation']['clean'])}")
    log(f"time per score: {metrics['time_per_score']}")
    metrics_path = options.metrics or options.out.with_suffix(".metrics.json")
    write_report(metrics_path.parent, {metrics_path.name: metrics})
    return TurnModelReport(threshold=threshold, metrics=metrics, history=history)


def _headline(summary: dict[str, Any]) -> str:
    return (
        f"complete {summary['complete']['accuracy']:.3f}, incomplete "
        f"{summary['incomplete']['accuracy']:.3f} (clearly incomplete "
        f"{summary['incomplete_clear']['accuracy']:.3f}), AUC {summary['auc']:.3f}"
    )


def _vocabulary(turns: Sequence[UserTurn], rng: random.Random, size: int = 50_000) -> list[str]:
    """Words drawn from the training turns by frequency: what a misheard word is replaced by."""
    sample = rng.sample(list(turns), min(len(turns), size))
    return [word for turn in sample for word in words_of(turn.text)]


def _jsonable_options(options: TurnModelOptions) -> dict[str, Any]:
    keep = replace(options, corpora=(), validation=Path(), out=Path(), test=None, metrics=None)
    values = asdict(keep)
    for key in ("corpora", "validation", "out", "test", "metrics", "command"):
        values.pop(key)
    return values


def _metadata(metrics: dict[str, Any]) -> dict[str, Any]:
    """What the weights file says about itself: how it was made and what it scored."""
    return {
        "trained_by": "cadence train-turn-model",
        "command": metrics["command"],
        "threshold_rule": metrics["threshold_rule"],
        "training": {k: metrics["training"][k] for k in ("corpora", "validation", "turns")},
        "validation_clean": metrics["validation"]["clean"],
    }
