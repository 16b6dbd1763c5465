"""Calibrating the language model's P(end of turn) on the dialogue corpora, and measuring it.

The language model needs no training to tell a finished utterance from an unfinished one; what
it needs is a scale: its raw P(``<|im_end|>``) says "complete" at 0.2 for some phrasings and
0.9 for others. :func:`fit_calibration` fits a logistic regression over the numbers one pass
gives (:data:`~cadence.llm.pretrained.turn_end.FEATURES`) by maximum likelihood on sgd_dev's
user turns — each turn whole (complete) against one prefix of it cut mid-sentence
(incomplete), both weighing the same — so that its P(complete) is a probability, and the wait
rule's log-odds (``confidence``, ``pause_scale_ms``) mean what they say.

The examples keep the turns' own text (punctuation inside; the scorer lower-cases the words
and drops the final punctuation, ``spoken_words``) — what Whisper writes is closer to that than
to the text model's normalised words — and label prefixes as the text
model's evaluation does: a cut where the writer ended a sentence, or a prefix that is a whole
user turn elsewhere ("yes"), is a complete utterance in its own right and is counted apart.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from cadence.core.stats import auc
from cadence.llm.pretrained import TurnEndModel
from cadence.llm.pretrained.turn_end import FEATURES, Calibration
from cadence.report.files import write_report
from cadence.tooling.bench.pause_points import UNFINISHED, normalised
from cadence.tooling.training.end_of_turn_examples import UserTurn, user_turns, whole_turns
from cadence.voice.turn.features import words_of

_SENTENCE_END = (".", "?", "!")


@dataclass(frozen=True)
class LMExample:
    text: str
    agent: str | None
    label: int
    """1: complete, 0: incomplete."""
    kind: str
    """``complete``, ``mid`` (cut mid-sentence), ``sentence_end`` or ``whole_turn``. Of the
    ``mid`` cuts, those after a word no English sentence ends on ("the", "to", "for": the
    turn-taking bench's list) are *clearly unfinished* in the figures."""


def lm_examples(
    turns: Sequence[UserTurn], known: frozenset[tuple[str, ...]], rng: random.Random
) -> list[LMExample]:
    """Each turn whole, and one prefix of it cut at a word boundary drawn uniformly."""
    examples: list[LMExample] = []
    for turn in turns:
        tokens = turn.text.split()
        if not tokens:
            continue
        examples.append(LMExample(turn.text, turn.agent, 1, "complete"))
        if len(tokens) < 2:
            continue
        k = rng.randrange(1, len(tokens))
        prefix = " ".join(tokens[:k])
        if tokens[k - 1].rstrip("\"')]").endswith(_SENTENCE_END):
            kind = "sentence_end"
        elif tuple(words_of(prefix)) in known:
            kind = "whole_turn"
        else:
            kind = "mid"
        examples.append(LMExample(prefix, turn.agent, 0, kind))
    return examples


def feature_rows(
    model: TurnEndModel, examples: Sequence[LMExample], cache: Path | None = None
) -> npt.NDArray[np.float64]:
    """The :data:`FEATURES` of each example, through one call's session (its cache reused
    between examples that share a context, as in a call) — or read back from ``cache``,
    written by an earlier run on the same examples (they are seeded)."""
    if cache is not None and cache.is_file():
        stored = np.load(cache)
        if stored.shape == (len(examples), len(FEATURES)):
            out: npt.NDArray[np.float64] = stored
            return out
    session = model.session()
    rows = np.asarray([session.features(e.text, e.agent) for e in examples], np.float64)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.save(cache, rows)
    return rows


def _progress(examples: int, seconds: float) -> str:
    each = 1000 * seconds / max(examples, 1)
    return f"{examples} examples scored in {seconds:.0f} s ({each:.0f} ms each)"


def _sigmoid(z: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    out: npt.NDArray[np.float64] = 0.5 * (1.0 + np.tanh(0.5 * z))  # never overflows
    return out


RIDGE = 1e-3
"""On the standardized features; chosen on sgd_dev, two-fold (1e-4, 1e-3 and 1e-2: AUC 0.952,
0.952, 0.947)."""


def fit_calibration(
    features: npt.NDArray[np.float64], labels: npt.NDArray[np.int64], ridge: float = RIDGE
) -> Calibration:
    """A logistic regression over the standardized features, by Newton's method with
    backtracking on the class-balanced log loss plus a ridge on the weights."""
    mean, scale = features.mean(axis=0), features.std(axis=0) + 1e-9
    x = np.hstack([(features - mean) / scale, np.ones((len(features), 1))])
    y = labels.astype(np.float64)
    weights = np.where(y == 1, 0.5 / max(y.sum(), 1), 0.5 / max((1 - y).sum(), 1))
    penalty = np.diag([*([ridge] * (x.shape[1] - 1)), 0.0])

    def loss(params: npt.NDArray[np.float64]) -> float:
        z = x @ params
        fit = float(np.sum(weights * (np.logaddexp(0.0, z) - y * z)))
        return fit + 0.5 * float(params @ penalty @ params)

    params = np.zeros(x.shape[1])
    for _ in range(100):
        q = _sigmoid(x @ params)
        gradient = x.T @ (weights * (q - y)) + penalty @ params
        hessian = (x * (weights * q * (1 - q))[:, None]).T @ x + penalty
        step = np.linalg.solve(hessian + 1e-9 * np.eye(len(params)), gradient)
        t, before = 1.0, loss(params)
        while loss(params - t * step) > before and t > 1e-8:
            t /= 2
        params = params - t * step
        if float(np.abs(t * step).max()) < 1e-10:
            break
    return Calibration(
        weights=tuple(float(w) for w in params[:-1]),
        mean=tuple(float(m) for m in mean),
        scale=tuple(float(v) for v in scale),
        bias=float(params[-1]),
    )


def calibrated(calibration: Calibration, rows: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """P(complete) of each feature row, as :class:`Calibration` computes it."""
    z = ((rows - np.asarray(calibration.mean)) / np.asarray(calibration.scale)) @ np.asarray(
        calibration.weights
    )
    return _sigmoid(z + calibration.bias)


TARGET_COMPLETE, TARGET_INCOMPLETE = 0.95, 0.97


def choose_threshold(
    complete: npt.NDArray[np.float64], incomplete: npt.NDArray[np.float64]
) -> float:
    """The threshold that leaves the largest margin over the weaker of the two targets
    (complete right ≥ 95 %, cut mid-sentence right ≥ 97 %)."""
    best, best_margin = 0.5, -math.inf
    for t in np.round(np.arange(0.02, 0.99, 0.005), 3):
        margin = min(
            float((complete >= t).mean()) - TARGET_COMPLETE,
            float((incomplete < t).mean()) - TARGET_INCOMPLETE,
        )
        if margin > best_margin + 1e-12:
            best, best_margin = float(t), margin
    return best


def summarize(
    p: npt.NDArray[np.float64], examples: Sequence[LMExample], threshold: float
) -> dict[str, Any]:
    """Shares right at ``threshold`` (complete: P ≥ it) by kind, and the AUCs."""
    labels = np.asarray([e.label for e in examples])
    kinds = np.asarray([e.kind for e in examples])
    out: dict[str, Any] = {"threshold": threshold}
    unfinished = np.asarray(
        [e.kind == "mid" and normalised(e.text.split()[-1]) in UNFINISHED for e in examples]
    )
    for name, mask, want in (
        ("complete", labels == 1, True),
        ("incomplete_clear", kinds == "mid", False),
        ("incomplete_unfinished", unfinished, False),
        ("incomplete_all", labels == 0, False),
    ):
        n = int(mask.sum())
        right = int(((p[mask] >= threshold) == want).sum())
        out[name] = {"n": n, "right": round(right / n, 4) if n else float("nan")}
    clear = (labels == 1) | (kinds == "mid")
    out["auc_complete_vs_clear"] = round(auc(p[clear], labels[clear]), 4)
    both = (labels == 1) | unfinished
    out["auc_complete_vs_unfinished"] = round(auc(p[both], labels[both]), 4)
    out["auc_complete_vs_all_prefixes"] = round(auc(p, labels), 4)
    return out


@dataclass(frozen=True)
class CalibrationRun:
    validation: Path
    out: Path
    test: Path | None = None
    metrics: Path | None = None
    max_dialogues: int | None = 400
    threshold: float = 0.9
    """A second P(complete) the figures are reported at, beside the chosen threshold."""
    seed: int = 0
    cache_dir: Path | None = None
    """Where the feature rows are kept between runs (a refit reuses them)."""


def _cache(run: CalibrationRun, corpus: Path) -> Path | None:
    if run.cache_dir is None:
        return None
    return run.cache_dir / f"{corpus.stem}-{run.max_dialogues}-{run.seed}.npy"


def calibrate_turn_lm(
    model: TurnEndModel, run: CalibrationRun, log: Callable[[str], None]
) -> dict[str, Any]:
    """Fit the calibration on ``run.validation``, write it to ``run.out``, and report the
    figures on validation and (scored once, never fit on) ``run.test``."""
    rng = random.Random(run.seed)
    metrics: dict[str, Any] = {"model": model.model.name, "threshold": run.threshold}
    turns = user_turns(run.validation, run.max_dialogues)
    examples = lm_examples(turns, whole_turns(turns), rng)
    started = time.perf_counter()
    log(f"scoring {len(examples)} examples of {run.validation.name}")
    rows = feature_rows(model, examples, _cache(run, run.validation))
    seconds = time.perf_counter() - started
    log(_progress(len(examples), seconds))
    fit_on = np.asarray([e.kind in ("complete", "mid") for e in examples])
    labels = np.asarray([e.label for e in examples])
    fit = fit_calibration(rows[fit_on], labels[fit_on])
    log(f"calibration on {run.validation.name}: weights {np.round(fit.weights, 3).tolist()}")
    dev_p, kinds = calibrated(fit, rows), np.asarray([e.kind for e in examples])
    threshold = choose_threshold(dev_p[kinds == "complete"], dev_p[kinds == "mid"])
    log(f"threshold {threshold:.3f}")
    metrics["threshold"] = threshold
    metrics["validation"] = {
        "corpus": run.validation.name,
        "examples": len(examples),
        "ms_per_example": round(1000 * seconds / max(len(examples), 1), 1),
        "at_threshold": summarize(dev_p, examples, threshold),
        "at_complete_at": summarize(dev_p, examples, run.threshold),
    }
    log(f"validation: {json.dumps(metrics['validation'])}")
    if run.test is not None:
        test_turns = user_turns(run.test, run.max_dialogues)
        test_examples = lm_examples(test_turns, whole_turns(test_turns), random.Random(run.seed))
        test_rows = feature_rows(model, test_examples, _cache(run, run.test))
        test_p = calibrated(fit, test_rows)
        metrics["test"] = {
            "corpus": run.test.name,
            "examples": len(test_examples),
            "at_threshold": summarize(test_p, test_examples, threshold),
            "at_complete_at": summarize(test_p, test_examples, run.threshold),
        }
        log(f"test: {json.dumps(metrics['test'])}")
    record = {
        "features": list(FEATURES),
        "weights": [round(w, 6) for w in fit.weights],
        "mean": [round(m, 6) for m in fit.mean],
        "scale": [round(v, 6) for v in fit.scale],
        "bias": round(fit.bias, 6),
        "threshold": threshold,
        "metadata": {
            "fit_on": f"{run.validation.name}: {int(fit_on.sum())} examples "
            f"(complete turns and prefixes cut mid-sentence, {run.max_dialogues} dialogues)",
            "model": model.model.name,
        },
    }
    run.out.parent.mkdir(parents=True, exist_ok=True)
    run.out.write_text(json.dumps(record, indent=2) + "\n")
    if run.metrics is not None:
        write_report(run.metrics.parent, {run.metrics.name: metrics})
    if not all(math.isfinite(w) for w in fit.weights):
        raise ValueError("the calibration came out degenerate (a weight is not finite)")
    return metrics
