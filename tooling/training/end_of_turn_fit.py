"""Training the text end-of-turn model: a logistic regression over the hashed features
(``cadence.voice.turn.features``), fitted with torch.

Why its own module: this is the part that needs torch and decides what the weights are, and
the examples and the figures need no torch. Sparse Adam over an
``EmbeddingBag``, the two classes weighted equally however many prefixes a turn gives, and the
epoch with the best held-out loss kept; the weights come out as a numpy array, which the runtime
reads without torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from cadence.tooling.training.end_of_turn_examples import Example
from cadence.tooling.training.end_of_turn_options import TurnModelOptions
from cadence.voice.turn.features import feature_names, hashed


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
