"""``cadence train-turn-model``: the text end-of-turn model, trained and evaluated on the
dialogue corpora.

Examples. Every user turn of the training corpora is a *complete* utterance (label 1); its
prefixes cut at word boundaries are *incomplete* ones (label 0) — what a speculative transcript
looks like when the caller pauses mid-sentence. Each example carries the agent's turn before it
as context. Some prefixes are complete sentences in their own right ("Yes, thanks." of "Yes,
thanks. What's their phone number?"): a prefix that ends where the writer ended a sentence, or
that is word for word a whole user turn elsewhere in the training corpora, is left out of
training (it would teach the model that finished sentences are unfinished) and is counted
apart in the evaluation, which is how much of the error is label noise is measured.

Augmentation, so that the model sees what Whisper writes rather than what the corpora's writers
typed: numbers written digit by digit ("5 5"), fillers inside an utterance ("um", "you know")
and at its start ("so", "well"), a trailing filler or conjunction ("and um", "so") that turns a
complete utterance into an incomplete one, a few per cent of words dropped or replaced by a word
drawn from the corpus, and the agent's context sometimes withheld. Punctuation and casing need
no augmentation: the features never see them.

Training is a logistic regression over the hashed features (``cadence.voice.turn.features``)
with torch (sparse Adam, classes weighted equally, the epoch with the best held-out loss kept);
it is exported as float16 numpy weights that the runtime reads without torch. The decision
threshold is tuned on the validation corpus (sgd_dev), never on the test corpus, which is only
scored once everything is fixed. Everything is seeded: the same command writes the same file.
"""

from __future__ import annotations

import json
import math
import random
import re
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from cadence.core.stats import auc
from cadence.tooling.training.corpus import read_dialogues
from cadence.voice.turn.features import feature_names, hashed, words_of
from cadence.voice.turn.text_model import TextEndOfTurnModel, save_weights

TARGET_INCOMPLETE = 0.95
"""Issue 17's target: the share of incomplete utterances classified incomplete."""
TARGET_COMPLETE = 0.92
"""… and of complete ones classified complete."""

INTERIOR_FILLERS = ("um", "uh", "er", "like", "you know", "i mean", "so", "well", "uh huh")
LEADING_FILLERS = ("um", "uh", "so", "well", "okay so", "um so", "yeah so", "oh")
TRAILING_FILLERS = (
    "um", "uh", "so", "and", "and um", "so um", "but", "or", "like", "you know", "and uh",
    "i mean", "because", "and then", "uh so", "with",
)  # fmt: skip
"""What a caller says before a pause that is not the end of the turn."""

_SENTENCE_END = re.compile(r"[.?!][\"')\]]*$")
_DIGIT_RUN = re.compile(r"\b\d{2,5}\b")


@dataclass(frozen=True)
class UserTurn:
    text: str
    agent: str | None
    """The agent's turn right before, if the turn before was the agent's."""


@dataclass(frozen=True)
class Example:
    words: tuple[str, ...]
    agent: str | None
    label: int
    """1: complete, 0: incomplete."""
    kind: str
    """``complete``; or why it is incomplete: ``mid`` (cut mid-sentence), ``sentence_end``
    (cut where the writer ended a sentence), ``whole_turn`` (a prefix that is a whole user turn
    elsewhere), ``trailing_filler`` (a complete turn followed by "and um")."""


@dataclass(frozen=True)
class Augmentation:
    """Probabilities of each change made to a training utterance (``none()`` for clean text)."""

    digit_split: float = 0.3
    """A number written digit by digit ("55" → "5 5"), as Whisper writes spoken digits."""
    interior_filler: float = 0.15
    leading_filler: float = 0.1
    word_drop: float = 0.03
    """Per word: Whisper missed it."""
    word_substitute: float = 0.02
    """Per word: Whisper heard another word (drawn from the corpus, by frequency)."""
    trailing_filler: float = 0.25
    """Per complete turn: an extra incomplete example, the turn + "and um" and the like."""
    prefix_trailing_filler: float = 0.15
    """Per prefix: a hesitation after it ("I'd like a table for um")."""
    no_context: float = 0.1
    """The agent's turn withheld, so the model also works without it."""

    @classmethod
    def none(cls) -> Augmentation:
        return cls(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True)
class TurnModelOptions:
    corpora: tuple[Path, ...]
    """Training dialogues (JSONL)."""
    validation: Path
    """Held-out dialogues: the best epoch and the threshold are chosen on them."""
    out: Path
    """The weights file to write (``.npz``)."""
    test: Path | None = None
    """Evaluation-only dialogues, scored once at the end (never trained or tuned on)."""
    metrics: Path | None = None
    """Where to write the metrics JSON (default: next to ``out``)."""
    dim: int = 1 << 18
    """Hashed feature vector size, a power of two (float16: 2 bytes each)."""
    epochs: int = 3
    learning_rate: float = 0.003
    batch_size: int = 256
    prefixes_per_turn: tuple[int, int] = (1, 3)
    """How many prefixes (at most) each training turn gives, drawn uniformly in this range."""
    augmentation: Augmentation = field(default_factory=Augmentation)
    seed: int = 0
    threads: int = 1
    max_dialogues: int | None = None
    """Use only the first N dialogues of each corpus (quick runs)."""
    latency_samples: int = 2000
    command: str = ""
    """The command line that ran this training, recorded in the metrics."""


@dataclass
class TurnModelReport:
    threshold: float
    metrics: dict[str, Any]
    history: list[dict[str, float]] = field(default_factory=list)


# ---------------------------------------------------------------------------------- examples


def user_turns(path: Path, limit: int | None = None) -> list[UserTurn]:
    """Every user turn of a corpus with the agent turn before it."""
    turns: list[UserTurn] = []
    for dialogue in read_dialogues(path, limit):
        previous: str | None = None
        for turn in dialogue.turns:
            if turn.speaker == "user":
                turns.append(UserTurn(turn.text, previous))
                previous = None
            else:
                previous = turn.text
    return turns


def whole_turns(turns: Iterable[UserTurn], min_count: int = 2) -> frozenset[tuple[str, ...]]:
    """The normalised texts that are whole user turns at least ``min_count`` times (once may be
    a typo): a prefix equal to one is a complete utterance in its own right ("yes", "no
    thanks"), not a truly incomplete one."""
    counts = Counter(tuple(words_of(t.text)) for t in turns)
    return frozenset(text for text, n in counts.items() if n >= min_count and text)


def _cuts(text: str) -> tuple[list[str], list[int], set[int]]:
    """The raw tokens of a turn, the cut points (prefix lengths 1 … n−1) and those of them
    where the writer ended a sentence."""
    tokens = text.split()
    cuts = list(range(1, len(tokens)))
    ends = {k for k in cuts if _SENTENCE_END.search(tokens[k - 1])}
    return tokens, cuts, ends


class _Noise:
    """The augmentation's random changes, from one seeded generator."""

    def __init__(self, aug: Augmentation, rng: random.Random, vocabulary: Sequence[str]) -> None:
        self.aug = aug
        self.rng = rng
        self.vocabulary = vocabulary

    def text(self, text: str) -> str:
        if self.rng.random() < self.aug.digit_split:
            return _DIGIT_RUN.sub(lambda m: " ".join(m.group()), text)
        return text

    def words(self, words: Sequence[str], *, at_start: bool = True) -> list[str]:
        rng, aug = self.rng, self.aug
        out: list[str] = []
        for word in words:
            if aug.word_drop and rng.random() < aug.word_drop:
                continue
            if self.vocabulary and aug.word_substitute and rng.random() < aug.word_substitute:
                word = rng.choice(self.vocabulary)
            out.append(word)
        if not out:
            out = list(words)
        if len(out) > 1 and rng.random() < aug.interior_filler:
            at = rng.randrange(1, len(out))
            out[at:at] = rng.choice(INTERIOR_FILLERS).split()
        if at_start and rng.random() < aug.leading_filler:
            out[:0] = rng.choice(LEADING_FILLERS).split()
        return out

    def trailing(self) -> list[str]:
        return self.rng.choice(TRAILING_FILLERS).split()

    def context(self, agent: str | None) -> str | None:
        return None if self.rng.random() < self.aug.no_context else agent


def training_examples(
    turns: Sequence[UserTurn],
    known: frozenset[tuple[str, ...]],
    options: TurnModelOptions,
    rng: random.Random,
    vocabulary: Sequence[str],
) -> list[Example]:
    """Each turn (complete), 1–3 of its mid-sentence prefixes, and the augmentation's extras."""
    noise = _Noise(options.augmentation, rng, vocabulary)
    low, high = options.prefixes_per_turn
    examples: list[Example] = []
    for turn in turns:
        text = noise.text(turn.text)
        agent = noise.context(turn.agent)
        complete = words_of(text)
        if not complete:
            continue
        examples.append(Example(tuple(noise.words(complete)), agent, 1, "complete"))
        if rng.random() < options.augmentation.trailing_filler:
            words = [*noise.words(complete), *noise.trailing()]
            examples.append(Example(tuple(words), agent, 0, "trailing_filler"))
        tokens, cuts, ends = _cuts(text)
        cuts = [k for k in cuts if k not in ends]
        for k in rng.sample(cuts, min(len(cuts), rng.randint(low, high))):
            prefix = words_of(" ".join(tokens[:k]))
            if not prefix or tuple(prefix) in known:
                continue
            words = noise.words(prefix)
            if rng.random() < options.augmentation.prefix_trailing_filler:
                words += noise.trailing()
            examples.append(Example(tuple(words), agent, 0, "mid"))
    return examples


def evaluation_examples(
    turns: Sequence[UserTurn],
    known: frozenset[tuple[str, ...]],
    rng: random.Random,
    noise: _Noise | None = None,
) -> list[Example]:
    """Each turn, complete, and one prefix cut at a word boundary drawn uniformly — sentence
    ends included, labelled by kind so that label noise is counted apart. With ``noise``, the
    same with the augmentation applied (and a trailing-filler example per turn at its rate)."""
    examples: list[Example] = []
    for turn in turns:
        text = noise.text(turn.text) if noise else turn.text
        complete = words_of(text)
        if not complete:
            continue
        shown = noise.words(complete) if noise else complete
        examples.append(Example(tuple(shown), turn.agent, 1, "complete"))
        if noise and rng.random() < noise.aug.trailing_filler:
            words = [*noise.words(complete), *noise.trailing()]
            examples.append(Example(tuple(words), turn.agent, 0, "trailing_filler"))
        tokens, cuts, ends = _cuts(text)
        if not cuts:
            continue
        k = rng.choice(cuts)
        prefix = words_of(" ".join(tokens[:k]))
        if not prefix:
            continue
        if k in ends:
            kind = "sentence_end"
        elif tuple(prefix) in known:
            kind = "whole_turn"
        else:
            kind = "mid"
        shown = noise.words(prefix) if noise else prefix
        examples.append(Example(tuple(shown), turn.agent, 0, kind))
    return examples


# ---------------------------------------------------------------------------------- encoding


@dataclass(frozen=True)
class Encoded:
    """Examples as a flat array of hashed feature indices and signs (CSR-like)."""

    indices: npt.NDArray[np.int64]
    signs: npt.NDArray[np.float32]
    starts: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]
    labels: npt.NDArray[np.float32]

    def __len__(self) -> int:
        return len(self.labels)

    def batch(
        self, rows: npt.NDArray[np.int64]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        lengths = self.lengths[rows]
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        flat = np.repeat(self.starts[rows] - offsets, lengths) + np.arange(lengths.sum())
        return (
            torch.from_numpy(self.indices[flat]),
            torch.from_numpy(offsets.astype(np.int64)),
            torch.from_numpy(self.signs[flat]),
            torch.from_numpy(self.labels[rows]),
        )


def encode(examples: Sequence[Example], dim: int) -> Encoded:
    indices: list[int] = []
    signs: list[float] = []
    lengths: list[int] = []
    for example in examples:
        idx, sgn = hashed(feature_names(list(example.words), example.agent), dim)
        indices += idx
        signs += sgn
        lengths.append(len(idx))
    length_array = np.asarray(lengths, np.int64)
    return Encoded(
        indices=np.asarray(indices, np.int64),
        signs=np.asarray(signs, np.float32),
        starts=np.concatenate([[0], np.cumsum(length_array)[:-1]]).astype(np.int64),
        lengths=length_array,
        labels=np.asarray([e.label for e in examples], np.float32),
    )


# ---------------------------------------------------------------------------------- training


class _LogisticRegression(torch.nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weights = torch.nn.EmbeddingBag(dim, 1, mode="sum", sparse=True)
        torch.nn.init.zeros_(self.weights.weight)
        self.bias = torch.nn.Parameter(torch.zeros(1))

    def forward(
        self, indices: torch.Tensor, offsets: torch.Tensor, signs: torch.Tensor
    ) -> torch.Tensor:
        summed: torch.Tensor = self.weights(indices, offsets, per_sample_weights=signs)
        return summed.squeeze(1) + self.bias

    def logits(self, data: Encoded, batch_size: int = 8192) -> npt.NDArray[np.float32]:
        out: list[npt.NDArray[np.float32]] = []
        with torch.no_grad():
            for start in range(0, len(data), batch_size):
                rows = np.arange(start, min(start + batch_size, len(data)))
                indices, offsets, signs, _ = data.batch(rows)
                out.append(self(indices, offsets, signs).numpy())
        return np.concatenate(out) if out else np.zeros(0, np.float32)


def fit(
    train: Encoded,
    validation: Encoded,
    options: TurnModelOptions,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
) -> tuple[npt.NDArray[np.float32], float, list[dict[str, float]]]:
    """Weights and bias of the epoch with the lowest validation loss, and each epoch's losses."""
    torch.manual_seed(options.seed)
    model = _LogisticRegression(options.dim)
    sparse = torch.optim.SparseAdam(list(model.weights.parameters()), lr=options.learning_rate)
    dense = torch.optim.Adam([model.bias], lr=options.learning_rate)
    positives = float(train.labels.sum())
    # Both classes weigh the same in the loss, however many prefixes a turn gives.
    pos_weight = (len(train) - positives) / max(positives, 1.0)
    order = np.random.default_rng(options.seed)
    history: list[dict[str, float]] = []
    best: tuple[float, npt.NDArray[np.float32], float] | None = None
    for epoch in range(options.epochs):
        model.train()
        permutation = order.permutation(len(train))
        total, seen = 0.0, 0
        for start in range(0, len(train), options.batch_size):
            rows = permutation[start : start + options.batch_size]
            indices, offsets, signs, labels = train.batch(rows)
            logits = model(indices, offsets, signs)
            weight = torch.where(labels > 0.5, pos_weight, 1.0)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                logits, labels, weight=weight
            )
            sparse.zero_grad()
            dense.zero_grad()
            torch.autograd.backward(loss)
            sparse.step()  # type: ignore[no-untyped-call]
            dense.step()
            total += loss.item() * len(rows)
            seen += len(rows)
        model.eval()
        val_logits = model.logits(validation)
        val_loss = _log_loss(val_logits, validation.labels)
        record = {"epoch": epoch + 1, "train_loss": total / max(seen, 1), "val_loss": val_loss}
        history.append(record)
        if on_epoch:
            on_epoch(record)
        if best is None or val_loss < best[0]:
            weights = model.weights.weight.detach().squeeze(1).numpy().copy()
            best = (val_loss, weights, float(model.bias.detach()))
    assert best is not None, "epochs must be at least 1"
    return best[1], best[2], history


def _log_loss(logits: npt.NDArray[np.float32], labels: npt.NDArray[np.float32]) -> float:
    z = logits.astype(np.float64)
    # log(1 + e^z) − y z, stably.
    return float(np.mean(np.logaddexp(0.0, z) - labels * z))


# ---------------------------------------------------------------------------------- evaluation


def choose_threshold(scores: npt.NDArray[np.float64], labels: npt.NDArray[np.int64]) -> float:
    """The threshold that leaves the larger margin over the weaker of the two targets
    (incomplete right ≥ 95 %, complete right ≥ 92 %), on held-out scores."""
    complete = np.sort(scores[labels == 1])
    incomplete = np.sort(scores[labels == 0])
    best_t, best_margin = 0.5, -math.inf
    for t in np.round(np.arange(0.02, 0.99, 0.005), 3):
        complete_right = 1.0 - np.searchsorted(complete, t, side="left") / len(complete)
        incomplete_right = np.searchsorted(incomplete, t, side="left") / len(incomplete)
        margin = min(incomplete_right - TARGET_INCOMPLETE, complete_right - TARGET_COMPLETE)
        if margin > best_margin + 1e-12:
            best_t, best_margin = float(t), margin
    return best_t


def score_examples(model: TextEndOfTurnModel, examples: Sequence[Example]) -> np.ndarray:
    """The runtime model's scores, through the same path a call takes (text → score)."""
    return np.asarray(
        [model.score(" ".join(e.words), agent_text=e.agent) for e in examples], np.float64
    )


def summarize(
    scores: npt.NDArray[np.float64], examples: Sequence[Example], threshold: float
) -> dict[str, Any]:
    """Accuracy at ``threshold`` of complete and incomplete utterances, by kind."""
    kinds = np.asarray([e.kind for e in examples])
    labels = np.asarray([e.label for e in examples])
    predicted = scores >= threshold
    out: dict[str, Any] = {}

    def share(mask: npt.NDArray[np.bool_], want: bool) -> dict[str, float]:
        n = int(mask.sum())
        right = int((predicted[mask] == want).sum())
        return {"n": n, "accuracy": round(right / n, 4) if n else float("nan")}

    out["complete"] = share(labels == 1, True)
    out["incomplete"] = share(labels == 0, False)
    # Incomplete beyond doubt: cut mid-sentence, or followed by a hesitation ("… and um").
    clear = (labels == 0) & np.isin(kinds, ["mid", "trailing_filler"])
    out["incomplete_clear"] = share(clear, False)
    for kind in ("mid", "sentence_end", "whole_turn", "trailing_filler"):
        mask = kinds == kind
        if mask.any():
            out[f"incomplete_{kind}"] = share(mask, False)
    wrong = (labels == 0) & predicted
    noisy = wrong & np.isin(kinds, ["sentence_end", "whole_turn"])
    out["incomplete_errors_that_are_complete_sentences"] = (
        round(float(noisy.sum() / wrong.sum()), 4) if wrong.any() else 0.0
    )
    out["auc"] = round(auc(scores, labels), 4)
    both = clear | (labels == 1)
    out["auc_complete_vs_clear"] = round(auc(scores[both], labels[both]), 4)
    return out


def time_per_score(
    model: TextEndOfTurnModel, examples: Sequence[Example], rounds: int = 5
) -> dict[str, float]:
    """Microseconds per ``score`` call, one thread, over real utterances with their context:
    the median of each round's per-call median, and the 99th percentile of all calls."""
    texts = [(" ".join(e.words), e.agent) for e in examples]
    for text, agent in texts[:200]:  # warm-up
        model.score(text, agent_text=agent)
    medians: list[float] = []
    every: list[float] = []
    for _ in range(rounds):
        calls: list[float] = []
        for text, agent in texts:
            begin = time.perf_counter_ns()
            model.score(text, agent_text=agent)
            calls.append((time.perf_counter_ns() - begin) / 1000)
        medians.append(statistics.median(calls))
        every += calls
    return {
        "median_us": round(statistics.median(medians), 1),
        "p99_us": round(float(np.percentile(every, 99)), 1),
        "calls": len(every),
    }


# ---------------------------------------------------------------------------------- the run


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
    noise = _Noise(options.augmentation, noise_rng, vocabulary)
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
        test_noise = _Noise(options.augmentation, random.Random(options.seed + 4), vocabulary)
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
    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    metrics_path.write_text(json.dumps(metrics, indent=2, ensure_ascii=False) + "\n")
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
