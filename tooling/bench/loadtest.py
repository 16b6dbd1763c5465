"""``cadence loadtest``: many calls at once against one server, for minutes, on real clips.

At each load level, ``sessions`` callers each place call after call through a real endpoint
— ``/twilio`` with the Twilio emulator, or the browser demo's WebRTC call with an aiortc
peer (``cadence.tooling.bench.runners``); one clip per call, the next clip in turn — until the
level's minutes are up. Calls past ``server.max_sessions`` are refused by the server and
counted, not retried at once. Every few seconds the process is sampled: resident memory,
open file descriptors, asyncio tasks, calls in progress. After the last level the server is
closed and every task still alive is a leak.

Each level's traces and samples are written as soon as it ends (``level-N.jsonl`` and
``level-N.json``), and a level whose files exist is not run again: a long run that is
interrupted resumes where it stopped.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

import psutil

from cadence.pipeline.config import CadenceConfig
from cadence.pipeline.tracing import TurnTrace
from cadence.pipeline.tracing.sinks import read_traces
from cadence.tooling.bench.load import LevelResult, ResourceSample, level_name
from cadence.tooling.bench.manifest import ManifestClip
from cadence.tooling.bench.runners import (
    CallRefusedError,
    CallRunner,
    TwilioTurnRunner,
    WebRTCTurnRunner,
)
from cadence.tooling.bench.turn_bench import Variant

RUNNERS: dict[str, type[CallRunner]] = {"twilio": TwilioTurnRunner, "webrtc": WebRTCTurnRunner}

SAMPLE_EVERY_S = 5.0
REFUSED_BACKOFF_S = 1.0
"""A refused (or failed) caller waits this long before calling again, as an auto-dialler
would."""


class _LevelFiles:
    """Where a level's results are kept, so that a run can resume after the levels it did."""

    def __init__(self, out: Path, sessions: int) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self._traces = out / f"level-{sessions}.jsonl"
        self._result = out / f"level-{sessions}.json"

    @property
    def done(self) -> bool:
        return self._traces.exists() and self._result.exists()

    def save(self, traces: list[TurnTrace], result: LevelResult) -> None:
        self._traces.write_text("".join(trace.to_json_line() + "\n" for trace in traces))
        self._result.write_text(result.to_json())

    def load(self) -> tuple[list[TurnTrace], LevelResult]:
        return read_traces(self._traces), LevelResult.from_json(self._result.read_text())


async def run_levels(
    clips: list[ManifestClip],
    config: CadenceConfig,
    *,
    transport: str,
    levels: list[int],
    minutes: float,
    out: Path,
) -> tuple[list[TurnTrace], list[LevelResult], list[str]]:
    """Every level in turn (those already in ``out`` are read back, not run); returns the
    traces, the level results and the names of the tasks left running at the end."""
    traces: list[TurnTrace] = []
    results: list[LevelResult] = []
    async with RUNNERS[transport](server=config.server) as runner:
        for sessions in levels:
            files = _LevelFiles(out, sessions)
            if not files.done:
                files.save(*await _run_level(runner, clips, config, sessions, minutes))
            level_traces, result = files.load()
            traces += level_traces
            results.append(result)
    current = asyncio.current_task()
    leaked = [task.get_name() for task in asyncio.all_tasks() if task is not current]
    return traces, results, leaked


async def _run_level(
    runner: CallRunner,
    clips: list[ManifestClip],
    config: CadenceConfig,
    sessions: int,
    minutes: float,
) -> tuple[list[TurnTrace], LevelResult]:
    variant = Variant(level_name(sessions), config)
    await runner.ready(variant)  # the models load before the level, not in its minutes or CPU
    result = LevelResult(sessions=sessions, minutes=minutes)
    traces: list[TurnTrace] = []
    started = time.monotonic()
    deadline = started + 60.0 * minutes
    numbers = itertools.count()

    async def caller(first: int) -> None:
        for index in itertools.count(first, sessions):
            if time.monotonic() >= deadline:
                return
            clip = clips[index % len(clips)]
            session_id = f"load{sessions}-{next(numbers)}"
            try:
                traces.extend(await runner(clip, variant, session_id, sessions))
                result.calls += 1
            except CallRefusedError:
                result.refused += 1
                await asyncio.sleep(REFUSED_BACKOFF_S)
            except Exception as exc:  # a failed call is a finding, not the end of the test
                result.errors.append(f"{session_id}: {exc!r}")
                await asyncio.sleep(REFUSED_BACKOFF_S)  # and no reason to call again at once

    async def sample() -> None:
        process = psutil.Process()
        while True:
            result.samples.append(
                ResourceSample(
                    at_s=time.monotonic() - started,
                    rss_mb=process.memory_info().rss / 2**20,
                    open_fds=process.num_fds(),
                    tasks=len(asyncio.all_tasks()),
                    calls=runner.calls_in_progress,
                )
            )
            await asyncio.sleep(SAMPLE_EVERY_S)

    sampler = asyncio.create_task(sample(), name="loadtest:sampler")
    cpu_before = _cpu_s()
    try:
        await asyncio.gather(*(caller(first) for first in range(sessions)))
    finally:
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
    result.cpu_s = _cpu_s() - cpu_before
    return traces, result


def _cpu_s() -> float:
    times = psutil.Process().cpu_times()
    return float(times.user + times.system)
