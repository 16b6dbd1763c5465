"""``Collector``: the last stage of a test pipeline, keeping every frame it receives and when."""

from __future__ import annotations

import time

from cadence.pipeline.frames import Frame
from cadence.pipeline.stage import Stage


class Collector(Stage):
    def __init__(self) -> None:
        super().__init__(name="collect")
        self.timed: list[tuple[float, Frame]] = []
        """(``time.perf_counter()`` at arrival, frame), in order."""

    @property
    def frames(self) -> list[Frame]:
        return [frame for _, frame in self.timed]

    async def process(self, frame: Frame) -> None:
        self.timed.append((time.perf_counter(), frame))
