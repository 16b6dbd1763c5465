"""``Stage``: one step of a pipeline, with one bounded input queue drained by one worker.

A subclass overrides ``process`` and calls ``push`` for what it produces. Work that must run
beside the worker (a synthesis that streams while more text arrives) is started with ``spawn``
so that the runtime can cancel it on an interrupt and at shutdown: a stage never owns a task
the pipeline does not know about.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, Protocol

from cadence.pipeline.frames import EndFrame, Frame

logger = logging.getLogger(__name__)

DEFAULT_QUEUE_SIZE = 64
"""Frames a stage may hold before ``push`` into it waits (backpressure). 64 × 20 ms of audio
is 1.28 s: enough to ride out a slow model call, small enough to notice a stuck stage."""


class StageHost(Protocol):
    """What a stage needs of the pipeline that runs it (``Pipeline`` is the one host)."""

    async def deliver(self, source: Stage, frame: Frame) -> None:
        """Route ``frame``, pushed by ``source``, to the stage after it."""
        ...

    async def interrupt_after(self, source: Stage, reason: str) -> None:
        """Halt and flush every stage after ``source``."""
        ...

    def fail(self, stage: Stage, error: BaseException) -> None:
        """End the pipeline because ``stage`` raised ``error``."""
        ...


class Stage:
    """Base of every pipeline step. Pass frames through unchanged unless overridden."""

    def __init__(self, *, name: str | None = None, queue_size: int = DEFAULT_QUEUE_SIZE) -> None:
        if queue_size < 1:
            raise ValueError(f"queue_size must be at least 1, got {queue_size}")
        self.name = name or type(self).__name__
        self.queue_size = queue_size
        self._queue: asyncio.Queue[Frame] | None = None
        self._pipeline: StageHost | None = None
        self._index = -1
        self._worker: asyncio.Task[None] | None = None
        self._spawned: set[asyncio.Task[Any]] = set()
        self._current: Frame | None = None

    # --- to override ------------------------------------------------------------------------

    async def process(self, frame: Frame) -> None:
        """Handle one frame from upstream. The default passes it on."""
        await self.push(frame)

    async def on_interrupt(self) -> None:
        """Reset per-reply state; in-flight work and queued frames are already gone."""

    async def on_end(self) -> None:
        """Finish what the stage holds before ``EndFrame`` moves on. Default: let spawned
        work run to completion."""
        while self._spawned:
            await asyncio.gather(*list(self._spawned), return_exceptions=True)

    async def on_close(self) -> None:
        """Release resources. Called once at shutdown, whether the pipeline ended or failed."""

    # --- for subclasses ---------------------------------------------------------------------

    async def push(self, frame: Frame) -> None:
        """Hand ``frame`` downstream; waits while the next stage's queue is full."""
        await self._attached.deliver(self, frame)

    async def interrupt(self, reason: str) -> None:
        """Cancel in-flight work of every stage after this one and flush their queues."""
        await self._attached.interrupt_after(self, reason)

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
        """Run ``coro`` beside the worker; cancelled on interrupt and shutdown, and a failure in
        it fails the session like a failure in ``process``."""
        task = asyncio.create_task(coro, name=f"{self.name}:{name}")
        self._spawned.add(task)
        task.add_done_callback(self._on_spawned_done)
        return task

    # --- runtime side (used by Pipeline) ----------------------------------------------------

    @property
    def _attached(self) -> StageHost:
        if self._pipeline is None:
            raise RuntimeError(f"stage {self.name} is not part of a running pipeline")
        return self._pipeline

    def _attach(self, pipeline: StageHost, index: int) -> None:
        if self._pipeline is not None:
            raise RuntimeError(f"stage {self.name} already belongs to a pipeline")
        self._pipeline = pipeline
        self._index = index
        self._queue = asyncio.Queue(self.queue_size)

    @property
    def _inbox(self) -> asyncio.Queue[Frame]:
        if self._queue is None:
            raise RuntimeError(f"stage {self.name} is not part of a pipeline")
        return self._queue

    def _start_worker(self) -> None:
        self._worker = asyncio.create_task(self._work(), name=f"{self.name}:worker")

    async def _work(self) -> None:
        inbox = self._inbox
        while True:
            frame = await inbox.get()
            self._current = frame
            try:
                if isinstance(frame, EndFrame):
                    await self.on_end()
                    await self.push(frame)
                    return
                await self.process(frame)
            except Exception as exc:
                self._attached.fail(self, exc)
                return
            finally:
                self._current = None

    def _on_spawned_done(self, task: asyncio.Task[Any]) -> None:
        self._spawned.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None and self._pipeline is not None:
            self._pipeline.fail(self, exc)

    async def _halt(self) -> Frame | None:
        """Cancel the worker and spawned work; return an ``EndFrame`` it was holding, if any."""
        held = self._current if isinstance(self._current, EndFrame) else None
        tasks = [t for t in (self._worker, *self._spawned) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._worker = None
        self._current = None
        return held

    def _flush(self) -> list[Frame]:
        """Drop queued frames, keeping only ``EndFrame``s (which must still arrive)."""
        kept: list[Frame] = []
        inbox = self._inbox
        while not inbox.empty():
            frame = inbox.get_nowait()
            if isinstance(frame, EndFrame):
                kept.append(frame)
        return kept

    @property
    def _tasks(self) -> list[asyncio.Task[Any]]:
        return [t for t in (self._worker, *self._spawned) if t is not None]
