"""``TextEndOfTurnModel``: P(the caller's utterance is complete | the transcript so far).

A logistic regression over hashed features of the normalised transcript and the agent's
previous turn (``features.py``), trained by ``cadence train-turn-model``
(``tooling/training/end_of_turn.py``) on the dialogue corpora: complete user turns against
their prefixes cut at word boundaries. The shipped weights are ``weights/text_end_of_turn.npz``,
package data like the other embedded models, read with numpy alone: scoring imports no torch,
touches no network and costs tens of microseconds, so it can run on every partial transcript.

The weights file holds ``weights`` (float16, one per hashed feature), ``bias``, ``threshold``
(the default decision threshold, tuned on held-out dialogues), ``feature_version`` and
``metadata`` (JSON: how it was trained and what it scored). A file that is missing, unreadable
or made for other features fails at load, not at the first call.
"""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from cadence.voice.turn.features import FEATURE_VERSION, featurize

WEIGHTS_RESOURCE = "weights/text_end_of_turn.npz"
"""The shipped weights, relative to the ``cadence.voice.turn`` package."""

_FIELDS = ("weights", "bias", "threshold", "feature_version", "metadata")


class TextEndOfTurnModelError(RuntimeError):
    """The weights file is missing, unreadable, or was made for other features. The message
    names the file and how to make a new one."""


class TextEndOfTurnModel:
    """Scores transcripts; one instance is immutable and safe to share between sessions."""

    def __init__(
        self,
        weights: npt.NDArray[np.float32],
        bias: float,
        threshold: float,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        dim = weights.shape[0]
        if weights.ndim != 1 or dim < 2 or dim & (dim - 1):
            raise ValueError(f"weights must be one vector of a power-of-two length, not {dim}")
        self._weights = weights.astype(np.float32, copy=False)
        self._bias = float(bias)
        self.threshold = float(threshold)
        """P(complete) at or above which an utterance counts as complete (``is_complete``)."""
        self.metadata: dict[str, Any] = dict(metadata or {})

    @property
    def dim(self) -> int:
        return int(self._weights.shape[0])

    @classmethod
    def load(cls, path: Path | None = None) -> TextEndOfTurnModel:
        """The shipped model, or the weights file at ``path`` (as ``train-turn-model`` writes)."""
        if path is None:
            resource = resources.files("cadence.voice.turn").joinpath(WEIGHTS_RESOURCE)
            name = f"the packaged weights ({WEIGHTS_RESOURCE} of cadence.voice.turn)"
            if not resource.is_file():
                raise TextEndOfTurnModelError(f"{name} are missing; {_REBUILD}")
            with resource.open("rb") as file:
                return cls._read(file, name)
        if not path.is_file():
            raise TextEndOfTurnModelError(f"end-of-turn weights {str(path)!r} do not exist")
        with path.open("rb") as file:
            return cls._read(file, repr(str(path)))

    @classmethod
    def _read(cls, file: IO[bytes], name: str) -> TextEndOfTurnModel:
        try:
            with np.load(file, allow_pickle=False) as archive:
                missing = [field for field in _FIELDS if field not in archive.files]
                if missing:
                    raise TextEndOfTurnModelError(
                        f"end-of-turn weights {name} lack {', '.join(missing)}; {_REBUILD}"
                    )
                arrays = {field: archive[field] for field in _FIELDS}
        except TextEndOfTurnModelError:
            raise
        except (OSError, ValueError, EOFError) as exc:
            raise TextEndOfTurnModelError(
                f"end-of-turn weights {name} are not a readable .npz file ({exc}); {_REBUILD}"
            ) from exc
        version = int(arrays["feature_version"])
        if version != FEATURE_VERSION:
            raise TextEndOfTurnModelError(
                f"end-of-turn weights {name} were trained for features v{version}, this code "
                f"computes v{FEATURE_VERSION}; {_REBUILD}"
            )
        try:
            metadata = json.loads(str(arrays["metadata"]))
            return cls(
                arrays["weights"].astype(np.float32),
                float(arrays["bias"]),
                float(arrays["threshold"]),
                metadata,
            )
        except ValueError as exc:
            raise TextEndOfTurnModelError(f"end-of-turn weights {name}: {exc}") from exc

    def logit(self, text: str, *, agent_text: str | None = None) -> float:
        indices, signs = featurize(text, agent_text, self.dim)
        return self._bias + float(self._weights[indices] @ np.asarray(signs, np.float32))

    def score(self, text: str, *, agent_text: str | None = None) -> float:
        """P(complete) of the caller's transcript so far, 0–1; ``agent_text`` is the agent's
        turn before it, when there was one. An empty transcript scores 0: nothing was said."""
        if not text.strip():
            return 0.0
        z = self.logit(text, agent_text=agent_text)
        # The logistic, written so that neither branch can overflow.
        if z >= 0:
            return 1.0 / (1.0 + math.exp(-z))
        e = math.exp(z)
        return e / (1.0 + e)

    def is_complete(self, text: str, *, agent_text: str | None = None) -> bool:
        return self.score(text, agent_text=agent_text) >= self.threshold


def save_weights(
    path: Path,
    weights: npt.NDArray[np.floating[Any]],
    bias: float,
    threshold: float,
    metadata: dict[str, Any],
) -> None:
    """Write a weights file that :meth:`TextEndOfTurnModel.load` reads (weights as float16,
    which keeps the shipped file small and moves no decision measurably)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as file:
        np.savez_compressed(
            file,
            weights=np.asarray(weights, np.float16),
            bias=np.float32(bias),
            threshold=np.float32(threshold),
            feature_version=np.int32(FEATURE_VERSION),
            metadata=np.str_(json.dumps(metadata, sort_keys=True)),
        )


_REBUILD = "reinstall cadence, or train new weights with `cadence train-turn-model`"
