"""What a load test measures besides latency: per load level, the calls placed and refused,
the errors, and samples of the process's resources over time — and the growth of those
resources, which is what a soak is for."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import numpy as np

WARM_UP_FRACTION = 0.2
"""The first part of a level is warm-up (models paged in, caches filled, allocator pools
grown); growth is measured over the rest."""


@dataclass(frozen=True)
class ResourceSample:
    at_s: float
    """Seconds since the level started."""
    rss_mb: float
    open_fds: int
    tasks: int
    calls: int


@dataclass
class LevelResult:
    sessions: int
    minutes: float
    calls: int = 0
    refused: int = 0
    errors: list[str] = field(default_factory=list)
    samples: list[ResourceSample] = field(default_factory=list)
    cpu_s: float | None = None
    """CPU time (user + system) of the whole process over the level: the server and, in the
    same process, the emulated callers (the same work whatever the server's models)."""

    @property
    def cpu_s_per_call(self) -> float | None:
        return self.cpu_s / self.calls if self.cpu_s is not None and self.calls else None

    @classmethod
    def from_json(cls, text: str) -> LevelResult:
        data = json.loads(text)
        samples = [ResourceSample(**sample) for sample in data.pop("samples")]
        return cls(**data, samples=samples)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def growth(self, measure: str) -> Growth | None:
        """The trend of ``measure`` (``rss_mb`` or ``open_fds``) after warm-up, by least
        squares; ``None`` with fewer than three samples after it."""
        if not self.samples:
            return None
        warm = self.samples[0].at_s + WARM_UP_FRACTION * (
            self.samples[-1].at_s - self.samples[0].at_s
        )
        kept = [s for s in self.samples if s.at_s >= warm]
        if len(kept) < 3:
            return None
        times = np.array([s.at_s for s in kept])
        values = np.array([float(getattr(s, measure)) for s in kept])
        slope, intercept = np.polyfit(times, values, 1)
        start = float(intercept + slope * times[0])
        end = float(intercept + slope * times[-1])
        return Growth(
            per_minute=float(slope) * 60.0,
            start=start,
            end=end,
            percent=100.0 * (end - start) / start if start else 0.0,
        )


@dataclass(frozen=True)
class Growth:
    per_minute: float
    start: float
    """The fitted value where the measured stretch begins ..."""
    end: float
    """... and where it ends."""
    percent: float


def level_name(sessions: int) -> str:
    """A load level's name in reports and traces (its variant)."""
    return f"{sessions} session{'' if sessions == 1 else 's'}"
