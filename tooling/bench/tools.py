"""What tool calls cost a caller: Cadence's own time per tool round, and the silence a slow
tool leaves — real calls (real speech through whisper, Piper, the turn engine, the `openai`
backend over loopback) against the fake service, scripted as a model that calls a tool.

* **Per round**: a model that calls an instant tool, then answers from its result. The fake
  service notes when it finished sending the answer that called the tool and when the next
  request (carrying the result) arrived; the gap is everything Cadence does in between —
  reading the end of the stream, validating and running the call, tracing it, building and
  sending the next request — with the call's audio being processed beside it.
* **A slow tool**: a model that says nothing and calls a tool that takes ``--slow-tool-ms``.
  From the caller's side (the recorded audio, judged by the caller's ear): the time from the
  commit to the first sound heard (the filler), and the longest silence from the commit to
  the end of the answer.

Run: cadence bench-tools -m tests/data/speech/manifest.jsonl [-o DIR] [--turns 10]
[--slow-turns 3] [--slow-tool-ms 2000]; with ``-o`` the traces (the true end of speech and what
the caller heard written in) and their latency report, with its tools section, go to DIR.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import count, pairwise

from cadence.core.stats import percentiles
from cadence.llm import LLMOptions, OpenAIOptions
from cadence.pipeline.agent import Agent
from cadence.pipeline.config import CadenceConfig, ModelsConfig, ToolsConfig
from cadence.pipeline.session import SAMPLE_RATE
from cadence.pipeline.tools import Tool, tool
from cadence.pipeline.tracing import AnchorEvent, TurnTrace
from cadence.tooling.bench.manifest import ManifestClip
from cadence.tooling.bench.turn_bench import answered_call, with_ground_truth
from cadence.tooling.emulators.hearing import WINDOW_MS
from cadence.tooling.emulators.openai import (
    Behaviour,
    FakeOpenAI,
    ReceivedRequest,
    Stream,
    StreamedCall,
    ToolCalls,
)
from cadence.tooling.recording_output import RecordingAudioOutput
from cadence.voice.audio.wavfile import read_audio

KEY_ENV = "CADENCE_BENCH_OPENAI_KEY"
ANSWER = ("The kitchen is open ", "until ten tonight.")
MAX_CALL_MS = 60_000.0
"""A call whose reply has not been heard to its end by then is measured as it is."""


@dataclass
class ToolModel:
    """The fake service's model: to the caller's words, a call to ``tool_name`` (with fresh
    ids, so that each result names its call); to a result, the answer."""

    tool_name: str
    said_first: tuple[str, ...] = ()
    calls_answered_at: dict[str, int] = field(default_factory=dict)
    """Each call's id → the index of the request whose answer made it."""
    _ids: count[int] = field(default_factory=count)

    def respond(self, request: ReceivedRequest, index: int) -> Behaviour:
        last = request.body["messages"][-1]
        if last["role"] == "tool":
            return Stream(ANSWER)
        call_id = f"call_{next(self._ids)}"
        self.calls_answered_at[call_id] = index
        call = StreamedCall(call_id, self.tool_name, '{"question": "opening hours"}')
        return ToolCalls(pieces=self.said_first, calls=(call,))


@tool(read_only=True)
async def instant_lookup(question: str) -> dict[str, str]:
    """Look the answer up."""
    return {"answer": "open until 22:00"}


def slow_lookup(delay_ms: float) -> Tool:
    @tool(read_only=True, name="slow_lookup")
    async def lookup(question: str) -> dict[str, str]:
        """Look the answer up (slowly)."""
        await asyncio.sleep(delay_ms / 1000)
        return {"answer": "open until 22:00"}

    return lookup


@dataclass(frozen=True)
class ToolCallRun:
    """One bench call: what was played, and its traces with the ground truth written in."""

    output: RecordingAudioOutput
    traces: list[TurnTrace]


async def run_calls(
    fake: FakeOpenAI,
    model: ToolModel,
    tools: Sequence[Tool],
    clips: list[ManifestClip],
    turns: int,
    variant: str,
) -> list[ToolCallRun]:
    """``turns`` calls of one turn each, the caller saying a clip of ``clips``, measured once
    the reply was heard to its end."""
    fake.respond = lambda request: model.respond(request, len(fake.requests) - 1)
    options = OpenAIOptions(base_url=fake.base_url, model="bench", api_key_env=KEY_ENV)
    config = CadenceConfig(
        models=ModelsConfig(llm=LLMOptions(backend="openai", openai=options)),
        tools=ToolsConfig(builtins=[]),
    )
    await Agent(config, tools).load()  # as a server does: the filler is synthesized ahead
    runs = []
    for turn in range(turns):
        clip = clips[turn % len(clips)]
        audio = read_audio(clip.path, SAMPLE_RATE)
        async with answered_call(config, audio, f"{variant}-{turn}", tools=tools) as call:
            # A turn's trace is written once its reply was played to the end.
            while not call.traces.turns and call.caller.position_ms < MAX_CALL_MS:
                await call.caller.pause(100)
        traces = with_ground_truth(
            call.traces.turns,
            clip,
            variant,
            true_end_ms=call.true_end_ms,
            heard_at_ms=call.output.heard_at_ms(),
            annotations={"concurrency": 1},
        )
        runs.append(ToolCallRun(call.output, traces))
    return runs


def round_overheads_ms(fake: FakeOpenAI, model: ToolModel) -> list[float]:
    """For each request carrying a tool's result: its arrival minus the end of the answer that
    called the tool (the instant tool's own time is in it, a few microseconds)."""
    gaps = []
    for request in fake.requests:
        last = request.body["messages"][-1]
        if last["role"] != "tool":
            continue
        called_by = model.calls_answered_at[last["tool_call_id"]]
        gaps.append(1000 * (request.arrived_s - fake.answered_s[called_by]))
    return gaps


def silences_ms(output: RecordingAudioOutput, trace: TurnTrace) -> tuple[float, float] | None:
    """For an answered turn: commit → first sound heard, and the longest silence from the
    commit to the last sound of its reply."""
    committed = trace.events.get(AnchorEvent.ENDPOINT)
    reply = trace.annotations.get("reply_index")
    sent = [s.at_ms for s in output.sent if s.frame.reply_index == reply]
    if committed is None or not sent:
        return None
    onsets = [at for at in output.heard_at_ms() if committed <= at <= sent[-1]]
    if not onsets:
        return None
    gaps = [onsets[0] - committed]
    gaps += [later - earlier - WINDOW_MS for earlier, later in pairwise(onsets)]
    return onsets[0] - committed, max(gaps)


def summary(samples: Sequence[float]) -> str:
    figures = percentiles(samples)
    shown = ", ".join(f"{name} {value:.1f}" for name, value in figures.items() if value is not None)
    return f"{shown} ms" if samples else "none"


@dataclass(frozen=True)
class ToolsBenchResult:
    round_overheads_ms: list[float]
    """Cadence's own time per tool round."""
    first_sound_ms: list[float]
    """Slow tool: commit → first sound heard, per turn."""
    longest_silence_ms: list[float]
    """Slow tool: the longest silence from the commit to the reply's last sound, per turn."""
    traces: list[TurnTrace]

    def lines(self, slow_tool_ms: float) -> list[str]:
        """The figures, as the command prints them."""
        label = f"{slow_tool_ms:g} ms tool"
        firsts, longest = self.first_sound_ms, self.longest_silence_ms
        return [
            f"tool round, Cadence's own time ({len(self.round_overheads_ms)} rounds): "
            f"{summary(self.round_overheads_ms)}",
            f"{label}, commit → first sound ({len(firsts)} turns): {summary(firsts)}",
            f"{label}, longest silence ({len(longest)} turns): {summary(longest)}",
        ]


async def run_tools_bench(
    clips: list[ManifestClip], turns: int, slow_turns: int, slow_tool_ms: float
) -> ToolsBenchResult:
    """``turns`` calls with an instant tool, then ``slow_turns`` with one of ``slow_tool_ms``."""
    os.environ.setdefault(KEY_ENV, "bench-key")
    async with FakeOpenAI() as fake:
        model = ToolModel("instant_lookup")
        instant = await run_calls(fake, model, [instant_lookup], clips, turns, "instant_tool")
        gaps = round_overheads_ms(fake, model)
    async with FakeOpenAI() as fake:
        slow_model, slow = ToolModel("slow_lookup"), [slow_lookup(slow_tool_ms)]
        variant = f"slow_tool_{slow_tool_ms:g}ms"
        slow_runs = await run_calls(fake, slow_model, slow, clips, slow_turns, variant)
    measured = [
        figures
        for run in slow_runs
        for trace in run.traces
        if (figures := silences_ms(run.output, trace)) is not None
    ]
    return ToolsBenchResult(
        round_overheads_ms=gaps,
        first_sound_ms=[first for first, _ in measured],
        longest_silence_ms=[longest for _, longest in measured],
        traces=[trace for run in (*instant, *slow_runs) for trace in run.traces],
    )
