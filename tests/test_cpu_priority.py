"""Urgent work first (docs/cpu-budget.md): the workers' order, dropped jobs, the urgent count
and its bounded wait; an abandoned whisper decode beside the next one (held running by the
test for as long as it takes, so that the order never depends on the machine's speed); a
call's first phrase before another's later ones; the rest of a reply generated only once its
first phrase is synthesized; the thread budget applied to torch, CTranslate2 and
onnxruntime."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
import torch
from models import synthesizer, transcriber
from speech_data import clip
from stub_generators import ScriptedGenerator

from cadence.core.clock import VirtualClock
from cadence.core.priority import URGENT_WORK, Priority, PriorityWorker, UrgentWork
from cadence.llm import DecoderTurnGenerator
from cadence.llm.adapted_decoding import AdaptedDecoder
from cadence.pipeline.agent import Agent
from cadence.pipeline.config import (
    CadenceConfig,
    EndOfTurnConfig,
    ThreadsConfig,
    TracingConfig,
    TurnConfig,
)
from cadence.pipeline.end_of_turn import EndOfTurnDetector
from cadence.pipeline.frames import Frame, ReplyPhraseFrame, SpeculativeTranscriptFrame
from cadence.pipeline.model_loading import load_stt, load_tts
from cadence.pipeline.pipeline import Pipeline
from cadence.pipeline.playback_ledger import PlaybackLedger
from cadence.pipeline.playout_gate import PlayoutGate
from cadence.pipeline.stages.tts import TTSStage
from cadence.pipeline.stages.turn import TurnStage
from cadence.voice.audio import PCM16
from cadence.voice.stt import Transcriber, Transcription
from cadence.voice.stt.transcriber import WhisperOptions

WAIT_S = 60.0
"""How long a test waits for what follows from what it did: only a broken system takes this
long, however busy the machine."""


async def until(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` — state that worker threads set, with no event on this loop —
    until it holds; after ``WAIT_S``, the test fails naming ``what``."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_S:.0f} s: {what}")
        await asyncio.sleep(0.001)


# --- the worker ---------------------------------------------------------------------------


class Blocker:
    """A job that holds a worker thread until released."""

    def __init__(self) -> None:
        self.running = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> None:
        self.running.set()
        self.release.wait(timeout=30)


async def busy_worker(
    priority: Priority,
) -> tuple[UrgentWork, PriorityWorker, Blocker, asyncio.Future[None]]:
    """A worker whose one thread runs a job (of ``priority``) until it is released."""
    work = UrgentWork()
    worker, blocker = PriorityWorker("test", urgent=work), Blocker()
    held = asyncio.ensure_future(worker.run(blocker, priority=priority))
    await until(blocker.running.is_set, "the blocking job to start")
    return work, worker, blocker, held


async def test_urgent_jobs_run_before_background_ones_queued_earlier() -> None:
    work, worker, blocker, held = await busy_worker(Priority.BACKGROUND)
    order: list[str] = []
    jobs = [
        asyncio.ensure_future(worker.run(order.append, name, priority=priority))
        for name, priority in [
            ("later phrase 1", Priority.BACKGROUND),
            ("later phrase 2", Priority.BACKGROUND),
            ("first phrase", Priority.URGENT),
        ]
    ]
    await asyncio.sleep(0.01)
    assert work.count == 1  # the urgent job, queued
    blocker.release.set()
    await asyncio.gather(held, *jobs)
    assert order == ["first phrase", "later phrase 1", "later phrase 2"]
    assert work.count == 0


async def test_a_job_abandoned_before_it_starts_never_runs() -> None:
    work, worker, blocker, held = await busy_worker(Priority.URGENT)
    ran: list[str] = []
    abandoned = asyncio.ensure_future(worker.run(ran.append, "abandoned", priority=Priority.URGENT))
    await asyncio.sleep(0.01)
    abandoned.cancel()
    await asyncio.gather(abandoned, return_exceptions=True)
    assert work.count == 1  # the running one only: the dropped job is no longer waited for
    blocker.release.set()
    await held
    await worker.run(ran.append, "next", priority=Priority.BACKGROUND)
    assert ran == ["next"]
    assert work.count == 0


async def test_a_background_job_waits_for_urgent_work_elsewhere_and_yields_to_its_own() -> None:
    work = UrgentWork(max_wait_ms=60_000)
    worker, order = PriorityWorker("test", urgent=work), list[str]()
    work.started()  # urgent work on another worker: a decode that decides a turn
    later = asyncio.ensure_future(
        worker.run(order.append, "later phrase", priority=Priority.BACKGROUND)
    )
    await asyncio.sleep(0.05)
    assert order == []  # it waits
    await worker.run(order.append, "first phrase", priority=Priority.URGENT)
    assert order == ["first phrase"]  # an urgent job of its own worker went first
    await asyncio.sleep(0.05)
    assert order == ["first phrase"]  # and the other urgent work is still going on
    work.finished()
    await asyncio.wait_for(later, 10)
    assert order == ["first phrase", "later phrase"]


async def test_a_background_job_waits_no_longer_than_the_bound() -> None:
    work = UrgentWork(max_wait_ms=50)
    worker = PriorityWorker("test", urgent=work)
    work.started()  # urgent work that never ends
    assert await asyncio.wait_for(worker.run(lambda: 7, priority=Priority.BACKGROUND), 10) == 7


async def test_a_failing_job_raises_in_its_caller_and_the_worker_goes_on() -> None:
    worker = PriorityWorker("test", urgent=UrgentWork())

    def fail() -> None:
        raise RuntimeError("model failed")

    with pytest.raises(RuntimeError, match="model failed"):
        await worker.run(fail, priority=Priority.URGENT)
    assert await worker.run(lambda: 42, priority=Priority.URGENT) == 42


async def test_background_work_waits_for_the_urgent_work_within_its_bound() -> None:
    work, clock = UrgentWork(max_wait_ms=250), VirtualClock()
    work.started()
    waited = asyncio.ensure_future(work.quiet(clock))
    await asyncio.sleep(0)  # it waits from now
    await clock.advance(249)
    assert not waited.done()
    work.finished()  # the urgent work is done before the bound: the wait ends at once
    await asyncio.wait_for(waited, 5)
    assert clock.now_ms() == 249

    work.started()  # urgent work that never ends does not starve the background
    waited = asyncio.ensure_future(work.quiet(clock))
    await asyncio.sleep(0)
    await clock.advance(249)
    assert not waited.done()
    await clock.advance(1)
    await asyncio.wait_for(waited, 5)
    work.finished()
    await work.quiet(clock)  # none urgent: no wait at all


# --- whisper: an abandoned decode does not delay the next ----------------------------------


class LoggedTranscriber(Transcriber):
    """The real whisper, its decodes logged as they start and end on their threads
    ("start 0", "end 0", …, numbered in the order they start). The first decode, once started,
    holds its thread until ``release`` is set: an abandoned decode that is still running, on a
    machine of any speed, for as long as the test needs it to be."""

    def __init__(self, model: Transcriber) -> None:
        super().__init__(model._model, model._options)
        self.log: list[str] = []
        self.release = threading.Event()
        self._lock = threading.Lock()

    def transcribe_blocking(self, pcm: PCM16) -> Transcription:
        with self._lock:
            number = sum(entry.startswith("start") for entry in self.log)
            self.log.append(f"start {number}")
        if number == 0:
            # Longer than the test waits for anything: the test, not the hold, gives up first.
            assert self.release.wait(2 * WAIT_S), "the held decode was never released"
        try:
            return super().transcribe_blocking(pcm)
        finally:
            with self._lock:
                self.log.append(f"end {number}")


async def abandon_one_then_decode_the_next(decoder: LoggedTranscriber, *, beside: bool) -> str:
    """Start a decode and abandon it once running (speech resumed), then decode the next
    utterance; its transcript. The abandoned decode runs until the next has started
    (``beside``: it must start beside it, or the test fails at the bound) or, without
    ``beside``, until it has been abandoned."""
    abandoned = asyncio.ensure_future(decoder.transcribe(clip("ds_arctic_a0024").audio()))
    await until(lambda: "start 0" in decoder.log, "the first decode to start")
    abandoned.cancel()
    await asyncio.gather(abandoned, return_exceptions=True)
    following = asyncio.ensure_future(decoder.transcribe(clip("sb_spk2_snt1").audio()))
    if beside:
        await until(lambda: "start 1" in decoder.log, "the next decode to start beside it")
    decoder.release.set()
    result = await following
    await until(lambda: "end 0" in decoder.log, "the abandoned decode to end")  # for what follows
    return result.text


async def test_an_abandoned_decode_does_not_delay_the_next() -> None:
    decoder = LoggedTranscriber(transcriber())  # the configured two decoders
    text = await abandon_one_then_decode_the_next(decoder, beside=True)
    assert "one war is enough" in text.lower()  # "we are sure that one war is enough"
    # The next decode started while the abandoned one still held its thread.
    assert decoder.log.index("start 1") < decoder.log.index("end 0")


async def test_with_one_decoder_the_next_decode_waits_for_the_abandoned() -> None:
    # The contrast: the same model behind a single decoder thread (the budget before).
    shared = transcriber()
    one = Transcriber(shared._model, WhisperOptions(model="embedded:tiny.en", workers=1))
    decoder = LoggedTranscriber(one)
    text = await abandon_one_then_decode_the_next(decoder, beside=False)
    assert "one war is enough" in text.lower()
    assert decoder.log == ["start 0", "end 0", "start 1", "end 1"]


# --- Piper: one call's first phrase before another call's later ones -----------------------


async def test_a_first_phrase_goes_before_another_calls_later_phrases() -> None:
    voice, done = synthesizer(), []

    async def speak(name: str, text: str, priority: Priority) -> None:
        async for _ in voice.synthesize(text, priority):
            pass
        done.append(name)

    later = [
        asyncio.ensure_future(
            speak(f"later {n}", f"This is the later phrase number {n}.", Priority.BACKGROUND)
        )
        for n in range(3)
    ]
    await asyncio.sleep(0.01)  # the later phrases are queued (one of them started)
    first = asyncio.ensure_future(speak("first", "Sure, one moment.", Priority.URGENT))
    await asyncio.gather(first, *later)
    assert done.index("first") <= 1  # after at most the phrase that was already running


# --- the turn engine: the rest of the reply waits for the first phrase --------------------

FIRST, REST = "Sure, I can do that.", " The table for two is booked at seven tonight."
GENERATED = {FIRST: "first piece generated", REST: "rest generated"}
"""What the log says as the generator makes each piece."""


class PhraseLog:
    def __init__(self, log: list[str]) -> None:
        self._log = log

    def on_frame(self, source: str, frame: Frame) -> None:
        if isinstance(frame, ReplyPhraseFrame):
            self._log.append(f"synthesized: {frame.text}")


async def test_the_first_phrase_is_synthesized_before_the_rest_is_generated() -> None:
    # The clock stands still, so the rest waits on the urgent work alone — the real Piper
    # synthesizing the first phrase — never on its time bound.
    assert URGENT_WORK.count == 0
    clock, log, ledger = VirtualClock(), list[str](), PlaybackLedger()
    turn = TurnStage(
        ScriptedGenerator(
            clock, [((FIRST, REST), ())], on_piece=lambda text: log.append(GENERATED[text])
        ),
        clock=clock,
        ledger=ledger,
        config=TurnConfig(end_of_turn=EndOfTurnConfig(model="punctuation")),
        end_of_turn=EndOfTurnDetector(EndOfTurnConfig(model="punctuation"), None),
        gate=PlayoutGate(),
        yield_to_urgent=True,
    )
    tts = TTSStage(synthesizer(), output_sample_rate=16000, ledger=ledger)
    pipeline = Pipeline([turn, tts], name="priority", observers=[PhraseLog(log)])
    await pipeline.start()
    try:
        await pipeline.queue(SpeculativeTranscriptFrame(text="A table for two.", at_ms=0.0))
        await until(lambda: "rest generated" in log, "the rest of the reply")
    finally:
        await pipeline.cancel("test over")
    assert log[:3] == ["first piece generated", "synthesized: Sure,", "rest generated"]


# --- the weights, loaded once -----------------------------------------------------------


async def test_the_sessions_of_an_agent_share_the_generator_weights() -> None:
    agent = Agent(CadenceConfig(tracing=TracingConfig(jsonl_path=None)))
    await agent.load()
    first, second = await agent.open_session(), await agent.open_session()
    try:
        one, other = (session.generator for session in (first, second))
        assert isinstance(one, DecoderTurnGenerator)
        assert isinstance(other, DecoderTurnGenerator)
        assert one is not other
        # The default generator, SmolLM2 with the AR adapter: each conversation has its own
        # cache…
        assert isinstance(one.decoder, AdaptedDecoder)
        assert isinstance(other.decoder, AdaptedDecoder)
        assert one.decoder.cache is not other.decoder.cache
        assert one.decoder.network is other.decoder.network  # …over one copy of the weights
    finally:
        await first.cancel("test over")
        await second.cancel("test over")


# --- the budget -----------------------------------------------------------------------------


async def test_the_thread_budget_is_applied() -> None:
    budget = ThreadsConfig(llm=1, stt=1, stt_workers=2, tts=1)
    config = CadenceConfig(threads=budget)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        await Agent(config).load()
        assert torch.get_num_threads() == 1
        fresh: list[int] = []
        thread = threading.Thread(target=lambda: fresh.append(torch.get_num_threads()))
        thread.start()
        thread.join()
        assert fresh == [1]  # a thread started later (a generator's) takes the budget
    finally:
        torch.set_num_threads(before)
    voice = load_tts(config.models.tts, budget)
    assert voice.threads == 1
    decoder = load_stt(config.models.stt, budget)
    assert decoder._model.model.num_workers == 2
    two = load_tts(config.models.tts, ThreadsConfig(tts=2))
    assert two is not voice  # a budget per load
    assert two.threads == 2
