"""``Pipeline``: chains stages, routes frames between them and owns every task they run.

One pipeline is one session. A stage that raises ends its own pipeline (logged with the
stage and the reason) and nothing else; other sessions on the same loop carry on. When
``wait``, ``end`` or ``cancel`` returns, every task the pipeline started has finished.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from enum import Enum
from typing import Any, Protocol

from cadence.pipeline.frames import CancelFrame, EndFrame, Frame, InterruptFrame, SystemFrame
from cadence.pipeline.stage import Stage

logger = logging.getLogger(__name__)

INPUT_SOURCE = "input"
"""Observer source name of frames queued into the pipeline from outside."""


class FrameObserver(Protocol):
    """Taps every frame a stage hands on (and every interrupt). Must not block."""

    def on_frame(self, source: str, frame: Frame) -> None: ...


class PipelineClosedError(RuntimeError):
    """Frames were queued into a pipeline that is not running."""


class StageFailedError(RuntimeError):
    """A stage raised; its session ended. ``__cause__`` is the original error."""

    def __init__(self, pipeline: str, stage: str, error: BaseException) -> None:
        super().__init__(f"session {pipeline}: stage {stage} failed: {error!r}")
        self.stage = stage
        self.error = error


class _State(Enum):
    IDLE = "idle"
    RUNNING = "running"
    STOPPING = "stopping"
    FINISHED = "finished"


class Pipeline:
    """Runs ``stages`` in order: each stage's ``push`` feeds the next one's queue."""

    def __init__(
        self,
        stages: Sequence[Stage],
        *,
        name: str = "pipeline",
        observers: Iterable[FrameObserver] = (),
    ) -> None:
        if not stages:
            raise ValueError("a pipeline needs at least one stage")
        self.name = name
        self.stages = list(stages)
        self.observers = list(observers)
        self._state = _State.IDLE
        self._failure: StageFailedError | None = None
        self._stop = asyncio.Event()
        self._finished = asyncio.Event()
        self._interrupt_lock = asyncio.Lock()
        self._supervisor: asyncio.Task[None] | None = None
        for index, stage in enumerate(self.stages):
            stage._attach(self, index)

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        if self._state is not _State.IDLE:
            raise RuntimeError(f"pipeline {self.name} was already started")
        self._state = _State.RUNNING
        for stage in self.stages:
            stage._start_worker()
        self._supervisor = asyncio.create_task(self._supervise(), name=f"{self.name}:supervisor")

    async def queue(self, frame: Frame) -> None:
        """Feed ``frame`` to the first stage; waits while its queue is full (backpressure)."""
        if self._state is not _State.RUNNING:
            raise PipelineClosedError(f"pipeline {self.name} is {self._state.value}")
        self._reject_system(frame)
        self._notify(INPUT_SOURCE, frame)
        await self.stages[0]._inbox.put(frame)

    async def end(self, timeout_s: float | None = None) -> None:
        """Let everything queued drain through every stage, then stop."""
        await self.queue(EndFrame())
        async with asyncio.timeout(timeout_s):
            await self.wait()

    async def cancel(self, reason: str) -> None:
        """Stop now, dropping in-flight work. Safe to call in any state."""
        if self._state is _State.IDLE:
            self._state = _State.FINISHED
            self._finished.set()
            return
        if not self._stop.is_set():
            logger.info("session %s: cancelled: %s", self.name, reason)
            self._notify(INPUT_SOURCE, CancelFrame(reason=reason))
            self._stop.set()
        await self._finished.wait()

    async def wait(self) -> None:
        """Wait until the pipeline stops; raises ``StageFailedError`` if a stage failed."""
        await self._finished.wait()
        if self._failure is not None:
            raise self._failure

    @property
    def failure(self) -> StageFailedError | None:
        return self._failure

    @property
    def finished(self) -> bool:
        return self._finished.is_set()

    @property
    def tasks(self) -> list[asyncio.Task[Any]]:
        """Every task this pipeline currently owns (empty once finished)."""
        owned = [task for stage in self.stages for task in stage._tasks]
        if self._supervisor is not None and not self._supervisor.done():
            owned.append(self._supervisor)
        return owned

    async def __aenter__(self) -> Pipeline:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.cancel("context exited")

    # --- used by stages ---------------------------------------------------------------------

    async def deliver(self, source: Stage, frame: Frame) -> None:
        self._reject_system(frame)
        self._notify(source.name, frame)
        if source._index + 1 < len(self.stages):
            await self.stages[source._index + 1]._inbox.put(frame)
        elif isinstance(frame, EndFrame):
            self._stop.set()

    async def interrupt_after(self, source: Stage, reason: str) -> None:
        downstream = self.stages[source._index + 1 :]
        async with self._interrupt_lock:
            self._notify(source.name, InterruptFrame(reason=reason))
            # Halt everything first so no stage can refill a queue that was already flushed.
            held = [await stage._halt() for stage in downstream]
            for stage, end in zip(downstream, held, strict=True):
                kept = stage._flush()
                for frame in ([end] if end is not None else []) + kept:
                    stage._inbox.put_nowait(frame)
                await stage.on_interrupt()
            for stage in downstream:
                stage._start_worker()

    def fail(self, stage: Stage, error: BaseException) -> None:
        if self._failure is None:
            logger.error(
                "session %s: stage %s failed: %s",
                self.name,
                stage.name,
                error,
                exc_info=(type(error), error, error.__traceback__),
            )
            self._failure = StageFailedError(self.name, stage.name, error)
            self._failure.__cause__ = error
        self._stop.set()

    # --- internals --------------------------------------------------------------------------

    async def _supervise(self) -> None:
        await self._stop.wait()
        self._state = _State.STOPPING
        for stage in self.stages:
            await stage._halt()
        for stage in self.stages:
            try:
                await stage.on_close()
            except Exception:
                logger.exception("session %s: stage %s failed to close", self.name, stage.name)
        self._state = _State.FINISHED
        self._finished.set()

    def _notify(self, source: str, frame: Frame) -> None:
        for observer in self.observers:
            try:
                observer.on_frame(source, frame)
            except Exception:
                logger.exception("session %s: observer %r failed", self.name, observer)

    @staticmethod
    def _reject_system(frame: Frame) -> None:
        if isinstance(frame, SystemFrame):
            raise TypeError(
                f"{frame.name} is out of band: use Stage.interrupt() or Pipeline.cancel()"
            )
