"""The pipeline runtime: ordering, backpressure, interrupts, failures and clean shutdown."""

from __future__ import annotations

import asyncio
import logging

import pytest

from cadence.pipeline.frames import (
    EndFrame,
    Frame,
    InterruptFrame,
    TextPieceFrame,
)
from cadence.pipeline.pipeline import Pipeline, PipelineClosedError, StageFailedError
from cadence.pipeline.stage import Stage


def piece(i: int) -> TextPieceFrame:
    return TextPieceFrame(text=str(i), at_ms=0.0, reply_index=0)


class Recorder:
    """Observer keeping (source, frame) of everything the pipeline routes."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Frame]] = []

    def on_frame(self, source: str, frame: Frame) -> None:
        self.seen.append((source, frame))

    def texts_from(self, source: str) -> list[str]:
        return [f.text for s, f in self.seen if s == source and isinstance(f, TextPieceFrame)]


class Suffix(Stage):
    """Appends its name to each text piece, so the path a frame took is visible."""

    async def process(self, frame: Frame) -> None:
        if isinstance(frame, TextPieceFrame):
            frame = TextPieceFrame(text=frame.text + self.name, at_ms=0.0, reply_index=0)
        await self.push(frame)


class Gate(Stage):
    """Holds each text frame until its gate opens; records what it started and finished."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.gate = asyncio.Event()
        self.started: list[str] = []
        self.finished: list[str] = []
        self.cancelled: list[str] = []
        self.interrupts = 0

    async def process(self, frame: Frame) -> None:
        if isinstance(frame, TextPieceFrame):
            self.started.append(frame.text)
            try:
                await self.gate.wait()
            except asyncio.CancelledError:
                self.cancelled.append(frame.text)
                raise
            self.finished.append(frame.text)
        await self.push(frame)

    async def on_interrupt(self) -> None:
        self.interrupts += 1


async def test_frames_keep_their_order_through_every_stage() -> None:
    recorder = Recorder()
    pipeline = Pipeline(
        [Suffix(name="a"), Suffix(name="b"), Suffix(name="c")], observers=[recorder]
    )
    await pipeline.start()
    for i in range(200):
        await pipeline.queue(piece(i))
    await pipeline.end(timeout_s=5)
    assert recorder.texts_from("c") == [f"{i}abc" for i in range(200)]
    assert isinstance(recorder.seen[-1][1], EndFrame)
    assert pipeline.tasks == []


async def test_a_full_queue_holds_the_producer_back() -> None:
    slow = Gate(name="slow", queue_size=2)
    pipeline = Pipeline([Stage(name="head", queue_size=2), slow])
    await pipeline.start()
    queued = 0

    async def produce() -> None:
        nonlocal queued
        for i in range(20):
            await pipeline.queue(piece(i))
            queued += 1

    producer = asyncio.create_task(produce())
    for _ in range(50):
        await asyncio.sleep(0)
    # head's queue (2) + head holding one while blocked on push + slow's queue (2)
    # + the one slow is processing: the producer must be stuck at 6.
    assert queued == 6
    assert not producer.done()
    slow.gate.set()
    await asyncio.wait_for(producer, 5)
    await pipeline.end(timeout_s=5)
    assert slow.finished == [str(i) for i in range(20)]


async def test_interrupt_cancels_in_flight_work_and_flushes_downstream_queues() -> None:
    class Trigger(Stage):
        async def process(self, frame: Frame) -> None:
            if isinstance(frame, TextPieceFrame) and frame.text == "barge-in":
                await self.interrupt("user started speaking")
                return
            await self.push(frame)

    class Spawner(Stage):
        """Passes frames on and keeps one background job running, like a synthesizer."""

        def __init__(self) -> None:
            super().__init__(name="spawner")
            self.job_cancelled = False

        async def process(self, frame: Frame) -> None:
            if isinstance(frame, TextPieceFrame) and frame.text == "0":
                self.spawn(self._job(), name="job")
            await self.push(frame)

        async def _job(self) -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.job_cancelled = True
                raise

    recorder = Recorder()
    spawner = Spawner()
    gate = Gate(name="gate")
    pipeline = Pipeline([Trigger(name="trigger"), spawner, gate], observers=[recorder])
    await pipeline.start()
    for i in range(5):
        await pipeline.queue(piece(i))
    for _ in range(20):
        await asyncio.sleep(0)
    assert gate.started == ["0"]  # 1..4 wait in the gate's queue

    await pipeline.queue(piece("barge-in"))  # type: ignore[arg-type]
    for _ in range(20):
        await asyncio.sleep(0)
    assert gate.cancelled == ["0"]
    assert spawner.job_cancelled
    assert gate.interrupts == 1
    interrupts = [(s, f) for s, f in recorder.seen if isinstance(f, InterruptFrame)]
    assert [(s, f.reason) for s, f in interrupts] == [("trigger", "user started speaking")]

    # The stages keep working after the interrupt; the flushed frames never arrive.
    gate.gate.set()
    await pipeline.queue(piece(99))
    await pipeline.end(timeout_s=5)
    assert gate.finished == ["99"]
    assert gate.started == ["0", "99"]


async def test_interrupt_keeps_an_end_frame_that_was_queued() -> None:
    head = Stage(name="head")
    gate = Gate(name="gate")
    pipeline = Pipeline([head, gate])
    await pipeline.start()
    await pipeline.queue(piece(1))
    ending = asyncio.create_task(pipeline.end(timeout_s=5))
    for _ in range(50):  # until the EndFrame waits in the gate's queue behind frame 1
        await asyncio.sleep(0)
    assert gate._inbox.qsize() == 1
    await head.interrupt("test")
    await ending  # would time out if the interrupt had dropped the EndFrame
    assert gate.cancelled == ["1"]
    assert gate.finished == []


async def test_a_failing_stage_ends_only_its_own_session(caplog: pytest.LogCaptureFixture) -> None:
    class Explode(Stage):
        async def process(self, frame: Frame) -> None:
            if isinstance(frame, TextPieceFrame) and frame.text == "3":
                raise ValueError("model returned garbage")
            await self.push(frame)

    healthy_recorder = Recorder()
    broken = Pipeline([Stage(name="in"), Explode(name="explode"), Gate(name="gate")], name="s1")
    healthy = Pipeline([Suffix(name="x")], name="s2", observers=[healthy_recorder])
    await broken.start()
    await healthy.start()
    with caplog.at_level(logging.ERROR):
        for i in range(5):
            await broken.queue(piece(i))
            await healthy.queue(piece(i))
        with pytest.raises(StageFailedError) as failure:
            await asyncio.wait_for(broken.wait(), 5)
    assert failure.value.stage == "explode"
    assert isinstance(failure.value.__cause__, ValueError)
    assert "session s1: stage explode failed: model returned garbage" in caplog.text
    assert broken.tasks == []
    with pytest.raises(PipelineClosedError):
        await broken.queue(piece(9))

    for i in range(5, 10):
        await healthy.queue(piece(i))
    await healthy.end(timeout_s=5)
    assert healthy_recorder.texts_from("x") == [f"{i}x" for i in range(10)]


async def test_a_failure_in_spawned_work_fails_the_session() -> None:
    class Background(Stage):
        async def process(self, frame: Frame) -> None:
            self.spawn(self._boom(), name="boom")

        async def _boom(self) -> None:
            raise RuntimeError("synthesizer crashed")

    pipeline = Pipeline([Background(name="bg"), Gate(name="gate")])
    await pipeline.start()
    await pipeline.queue(piece(1))
    with pytest.raises(StageFailedError, match="synthesizer crashed"):
        await asyncio.wait_for(pipeline.wait(), 5)
    assert pipeline.tasks == []


async def test_cancel_stops_everything_in_flight() -> None:
    gate = Gate(name="gate")
    closed: list[str] = []

    class Closing(Stage):
        async def on_close(self) -> None:
            closed.append(self.name)

    pipeline = Pipeline([Closing(name="a"), gate, Closing(name="b")])
    async with pipeline:
        for i in range(10):
            await pipeline.queue(piece(i))
        for _ in range(20):  # turns of the event loop, not time: the same on a busy machine
            await asyncio.sleep(0)
        assert gate.started == ["0"]
    assert pipeline.finished
    assert gate.cancelled == ["0"]
    assert closed == ["a", "b"]
    assert pipeline.tasks == []
    await pipeline.wait()  # a cancelled pipeline did not fail


async def test_out_of_band_frames_cannot_be_queued() -> None:
    pipeline = Pipeline([Stage()])
    async with pipeline:
        with pytest.raises(TypeError, match="out of band"):
            await pipeline.queue(InterruptFrame(reason="x"))


def test_a_stage_belongs_to_one_pipeline() -> None:
    stage = Stage()
    Pipeline([stage])
    with pytest.raises(RuntimeError, match="already belongs"):
        Pipeline([stage])
