"""``cadence bench-workers``: ``cadence serve --workers N`` measured from the callers' side —
1 against 2 workers at each load level, a worker killed mid-call, a drain under load.

The server is the real command in a process of its own, as a deployment runs it; the callers
are Twilio emulators (``tooling/emulators/twilio.py``) on loopback, each placing call after
call, one clip per call, as ``cadence loadtest`` does — but nothing is read from the server's
traces: each call is judged by what its caller heard.

* **voice-to-voice**: the clip's true end of speech (``speech_bounds_ms``) to the first
  reply sound the caller heard (``tooling/emulators/hearing.py``), of the calls answered
  after it; every call has an outcome (the tracer's, or why it had no turn: ``calls.py``), and every
  outcome is counted.
* **CPU per call**: the CPU time of the pool and its workers over a level, divided by the
  seconds of calls in progress — cores a call keeps busy, at that load.
* **which worker**: every second, each worker's established connections on the port (its
  calls), to see how evenly the kernel spreads them; and, as the control, the same calls
  spread perfectly evenly over two lone servers (``even-cN``: each caller keeps to one of
  them) — what a parent handing each call to the least busy worker would at best achieve.
* **a worker killed**: ``SIGKILL`` to one worker of two while calls run; its calls in
  progress at that moment are counted, and every call cut is set against them.
* **a drain**: ``SIGTERM`` to the pool while calls run; every call in progress then should
  end as answered, and newcomers be refused (1013 ``draining``) or find the port closed.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cadence.core.stats import percentiles
from cadence.pipeline.config import CadenceConfig
from cadence.report.files import write_report
from cadence.tooling.bench.calls import CALL_OUTCOMES, CallFailure, CallResult, place_call
from cadence.tooling.bench.manifest import ManifestClip
from cadence.tooling.bench.runners import CallerClip
from cadence.tooling.bench.server_process import ServerProcess

SAMPLE_EVERY_S = 1.0
RETRY_AFTER_S = 1.0
"""A refused or failed caller waits this long before calling again, as an auto-dialler would."""
EVENT_AFTER_S = 20.0
"""How far into a kill or drain run the worker is killed, or the pool told to stop."""


@dataclass
class RunResult:
    """One run: a pool, a number of callers, and what happened to every call."""

    name: str
    workers: int
    callers: int
    minutes: float
    servers: int = 1
    """Lone servers the callers are split between (the even-spread control), or 1: a pool."""
    calls: list[CallResult] = field(default_factory=list)
    cpu_s: float = 0.0
    call_s: float = 0.0
    """Seconds of calls in progress, summed over the calls."""
    spread: list[dict[str, int]] = field(default_factory=list)
    """Each sample of the calls in progress per worker (by pid)."""
    event: dict[str, Any] = field(default_factory=dict)
    """What was done mid-run (a kill, a drain) and what it found."""

    def figures(self) -> dict[str, Any]:
        outcomes = Counter(call.outcome.value for call in self.calls)
        latencies = [c.voice_to_voice_ms for c in self.calls if c.voice_to_voice_ms is not None]
        busiest = [max(s.values()) / sum(s.values()) for s in self.spread if sum(s.values()) >= 2]
        return {
            "name": self.name,
            "workers": self.workers,
            "servers": self.servers,
            "callers": self.callers,
            "minutes": self.minutes,
            "calls": len(self.calls),
            "outcomes": {str(outcome): outcomes.get(str(outcome), 0) for outcome in CALL_OUTCOMES},
            "voice_to_voice_ms": percentiles(latencies),
            # A killed or drained worker takes its CPU time with it: plain runs only.
            "cpu_s_per_call_s": (
                self.cpu_s / self.call_s if self.call_s and not self.event.get("kind") else None
            ),
            "busiest_worker_share_p50": percentiles(busiest)["p50"] if busiest else None,
            "event": self.event,
        }


async def run_load(
    servers: Sequence[ServerProcess],
    clips: Sequence[CallerClip],
    run: RunResult,
    *,
    at_event: float | None = None,
    event: str | None = None,
) -> None:
    """``run.callers`` callers for ``run.minutes``, caller ``i`` calling ``servers[i % n]``;
    ``event`` (``kill`` or ``drain``, on a single pool) happens ``at_event`` seconds in."""
    server = servers[0]
    origin = time.monotonic()
    deadline = origin + 60.0 * run.minutes
    numbers = itertools.count()
    stopped = asyncio.Event()

    def server_gone() -> bool:
        return all(s.process is not None and s.process.returncode is not None for s in servers)

    def calls_by_worker() -> dict[int, int]:
        return {pid: n for s in servers for pid, n in s.calls_by_worker().items()}

    async def caller(index: int) -> None:
        # After a drain began, callers go on calling (and are refused) until the pool exits.
        while time.monotonic() < deadline and not (stopped.is_set() and server_gone()):
            clip = clips[next(numbers) % len(clips)]
            result = CallResult(index, time.monotonic() - origin)
            await place_call(servers[index % len(servers)].twilio_url, clip, result, origin)
            run.calls.append(result)
            if not result.served:
                await asyncio.sleep(RETRY_AFTER_S)

    async def watch() -> None:
        while True:
            run.spread.append({str(pid): n for pid, n in calls_by_worker().items()})
            await asyncio.sleep(SAMPLE_EVERY_S)

    async def act() -> None:
        if at_event is None or event is None:
            return
        await asyncio.sleep(at_event)
        by_worker = server.calls_by_worker()
        if event == "kill":
            victim = max(by_worker, key=lambda pid: by_worker[pid])
            run.event = {"kind": "kill", "at_s": at_event, "pid": victim, "calls": by_worker}
            os.kill(victim, signal.SIGKILL)
        else:
            run.event = {"kind": "drain", "at_s": at_event, "calls": by_worker}
            server.signal(signal.SIGTERM)
            stopped.set()

    cpu_before = sum(s.cpu_seconds() for s in servers)
    watcher = asyncio.create_task(watch())
    actor = asyncio.create_task(act())
    try:
        await asyncio.gather(*(caller(index) for index in range(run.callers)))
        await actor
    finally:
        watcher.cancel()
        actor.cancel()
        await asyncio.gather(watcher, actor, return_exceptions=True)
    run.cpu_s = sum(s.cpu_seconds() for s in servers) - cpu_before
    run.call_s = sum(c.ended_s - c.started_s for c in run.calls if c.served)
    if event is not None and at_event is not None:
        _judge_event(run, at_event)


def _judge_event(run: RunResult, at_s: float) -> None:
    """What the kill or the drain did to the calls in progress at that moment, and to those
    placed after it."""
    during = [c for c in run.calls if c.started_s < at_s < c.ended_s]
    after = [c for c in run.calls if c.started_s >= at_s]
    run.event["in_progress"] = len(during)
    run.event["in_progress_outcomes"] = dict(Counter(c.outcome.value for c in during))
    run.event["after_outcomes"] = dict(Counter(c.outcome.value for c in after))
    if run.event["kind"] == "kill":
        victim_calls = run.event["calls"].get(run.event["pid"], 0)
        cut = sum(1 for c in during if c.outcome is CallFailure.CUT)
        run.event["victim_calls"] = victim_calls
        run.event["others_cut"] = max(0, cut - victim_calls)


def bench_workers(
    clips: Sequence[ManifestClip],
    *,
    workers: Sequence[int],
    levels: Sequence[int],
    minutes: float,
    config: CadenceConfig,
    out: Path,
) -> dict[str, Any]:
    """Every run, one after the other, each on a fresh pool; a run whose file is in ``out``
    is read back, not run again (a long benchmark resumes where it stopped).

    Every server runs ``config`` with room for every caller in each worker
    (``server.max_sessions``) and no trace log: a caller who hangs up and calls again at once
    may find the last call not yet released, and refusals at the limit would lighten one
    worker's load and not the other's."""
    out.mkdir(parents=True, exist_ok=True)
    roomy = config.server.model_copy(update={"max_sessions": 2 * max(levels)})
    no_log = config.tracing.model_copy(update={"jsonl_path": None})
    settings = out / "config.json"
    settings.write_text(
        config.model_copy(update={"server": roomy, "tracing": no_log}).model_dump_json(indent=1)
    )
    caller_clips = [CallerClip.of(clip) for clip in clips]
    runs: list[dict[str, Any]] = []
    plan: list[tuple[str, int, int, str | None]] = [
        (f"w{n}-c{level}", n, level, None) for n in workers for level in levels
    ]
    plan += [(f"even-c{max(levels)}", 1, max(levels), "even")]
    plan += [(f"kill-w2-c{max(levels)}", 2, max(levels), "kill")]
    plan += [(f"drain-w2-c{max(levels)}", 2, max(levels), "drain")]
    for name, n, level, event in plan:
        saved = out / f"{name}.json"
        if not saved.exists():
            run = RunResult(name, n, level, minutes, servers=2 if event == "even" else 1)
            log = out / f"{name}.server.log"
            asyncio.run(_run_on_fresh_pool(run, caller_clips, settings, event, log))
            write_report(out, {saved.name: run.figures() | {"calls_detail": _details(run)}})
        runs.append(json.loads(saved.read_text()))
    report = {"runs": [{k: v for k, v in r.items() if k != "calls_detail"} for r in runs]}
    write_report(out, {"workers.json": report})
    return report


async def _run_on_fresh_pool(
    run: RunResult, clips: Sequence[CallerClip], config: Path, event: str | None, log: Path
) -> None:
    servers = [ServerProcess(run.workers, config, log) for _ in range(run.servers)]
    try:
        for server in servers:
            await server.start()
        at = EVENT_AFTER_S if event in ("kill", "drain") else None
        await run_load(servers, clips, run, at_event=at, event=None if at is None else event)
    finally:
        statuses = [await server.stop() for server in servers]
        run.event["exit_status"] = statuses[0] if len(statuses) == 1 else statuses


def _details(run: RunResult) -> list[dict[str, Any]]:
    return [asdict(call) for call in run.calls]


def render_markdown(report: dict[str, Any], command: str, machine: str) -> str:
    lines = [
        "# Workers, measured from the callers' side",
        "",
        f"Machine: {machine}.  ",
        f"Command: `{command}`.  ",
        "Each run is a fresh `cadence serve --workers N` and N callers (Twilio emulators on "
        "loopback, the same machine) placing call after call, one real clip each. "
        "Voice-to-voice: the clip's true end of speech → the first reply sound the caller "
        "heard, of the calls answered after it; every call's outcome is counted. CPU per call: "
        "the server's CPU seconds over the run / the seconds of calls in progress. Busiest "
        "worker: its share of the calls in progress, median of the 1 s samples with ≥ 2 calls.",
        "",
        "| run | workers | callers | calls | answered | talked over | unanswered | refused "
        "| cut | unreachable | voice-to-voice p50 | p95 | CPU s per call s | busiest worker |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in report["runs"]:
        o = run["outcomes"]
        v2v = run["voice_to_voice_ms"]
        cpu = run["cpu_s_per_call_s"]
        share = run["busiest_worker_share_p50"]
        lines.append(
            f"| {run['name']} | {_workers(run)} | {run['callers']} | {run['calls']} "
            f"| {o['answered']} | {o['talked_over']} | {o['unanswered']} | {o['refused']} "
            f"| {o['cut']} | {o['unreachable']} | {_ms(v2v['p50'])} | {_ms(v2v['p95'])} "
            f"| {'—' if cpu is None else f'{cpu:.2f}'} "
            f"| {'—' if share is None else f'{100 * share:.0f} %'} |"
        )
    for run in report["runs"]:
        event = run["event"]
        if event.get("kind") == "kill":
            lines += [
                "",
                f"**{run['name']}**: worker pid {event['pid']} killed (SIGKILL) "
                f"{event['at_s']:.0f} s in, holding {event['victim_calls']} of the calls "
                f"({event['calls']}). Calls in progress then: {event['in_progress']}, "
                f"ended {event['in_progress_outcomes']}; calls of the other workers cut: "
                f"{event['others_cut']}. Calls placed after: {event['after_outcomes']}.",
            ]
        elif event.get("kind") == "drain":
            lines += [
                "",
                f"**{run['name']}**: SIGTERM to the pool {event['at_s']:.0f} s in, calls in "
                f"progress {event['calls']}. They ended {event['in_progress_outcomes']}; "
                f"calls placed after: {event['after_outcomes']}; the pool's exit status "
                f"{event['exit_status']}.",
            ]
    return "\n".join(lines) + "\n"


def _workers(run: dict[str, Any]) -> str:
    servers = run.get("servers", 1)
    return str(run["workers"]) if servers == 1 else f"{servers} lone servers, even"


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}"
