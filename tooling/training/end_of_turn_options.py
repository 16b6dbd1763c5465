"""What a run of ``cadence train-turn-model`` is given: its corpora, its recipe and the
augmentation's rates.

Apart from the run so that the command's defaults (``tooling/cli/turn_cmd.py``), the examples,
the fit and the metrics JSON read one definition of every option, and a test can check that the
command line and the training agree without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


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
