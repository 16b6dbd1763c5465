"""``cadence bench``: voice-to-voice turns on real speech, the way a caller feels them.

Each manifest clip is one user turn in a session of its own: 1 s of silence, the clip, then
silence until a reply is heard after the clip's true end of speech (at least ``TAIL_MS``, at
most ``MAX_REPLY_WAIT_MS``), all streamed in 20 ms frames at real-time pace; then the call
ends — the rest of the reply would add nothing to the figures. A reply heard while the caller
was still speaking does not end the wait: the answer to the whole utterance is still owed,
and a turn that never gets one is ``unanswered``. ``concurrency`` sessions run side by side.
The true end of speech comes from the clip's energy envelope, so ``user_speech_end`` in every
trace is ground truth; the VAD's own estimate is kept beside it (``vad_speech_end_ms``). The
caller's ear (``tooling/emulators/hearing.py``) writes ``audio_heard_first`` into each trace
whose reply it heard.

With ablations, every clip is run under every variant in the same process, variants
interleaved clip by clip so that the machine's drift hits them alike. Other transports
(``--transport twilio``: the real ``/twilio`` endpoint, 8 kHz μ-law, played by a Twilio
emulator) are interleaved the same way, each a variant of its own.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from cadence.core.clock import MonotonicClock
from cadence.llm.options import LLMOptions
from cadence.pipeline.config import CadenceConfig, TracingConfig
from cadence.pipeline.frames import FinalTranscriptFrame, Frame
from cadence.pipeline.pipeline import FrameObserver
from cadence.pipeline.session import SAMPLE_RATE, VoiceSession
from cadence.pipeline.tools import Tool
from cadence.pipeline.tracing import CALLER_MEASURED, AnchorEvent, MemoryTraceSink, TurnTrace
from cadence.pipeline.tracing.turn_trace import Annotation
from cadence.tooling.bench.manifest import ManifestClip
from cadence.tooling.caller import SimulatedCaller
from cadence.tooling.emulators.hearing import first_heard_after
from cadence.tooling.recording_output import RecordingAudioOutput
from cadence.voice.audio.pcm import PCM16
from cadence.voice.audio.speech_bounds import speech_bounds_ms
from cadence.voice.audio.wavfile import read_audio

LEAD_MS = 1000.0
"""Silence before the clip, while the session settles."""
TAIL_MS = 1000.0
"""Silence after the clip, at the least."""
MAX_REPLY_WAIT_MS = 15_000.0
"""How long after the true end of speech the caller waits for a reply before the turn is
unanswered."""
POLL_MS = 100.0
"""How often the caller checks, while waiting, whether it has heard a reply."""

ABLATIONS = ("speculation", "early_emission", "ar")
"""What ``--ablate`` can switch off, each as a variant beside the full configuration."""


@dataclass(frozen=True)
class Variant:
    name: str
    config: CadenceConfig


def variants(config: CadenceConfig, ablate: list[str]) -> list[Variant]:
    """The full configuration first, then one variant per ablation."""
    unknown = set(ablate) - set(ABLATIONS)
    if unknown:
        raise ValueError(f"unknown ablation {sorted(unknown)}; choose from {list(ABLATIONS)}")
    result = [Variant("full", config)]
    for name in ablate:
        if name == "ar":
            llm = LLMOptions.model_validate(
                config.models.llm.model_dump() | {"backend": "ar", "checkpoint": "embedded:ar"}
            )
            models = config.models.model_copy(update={"llm": llm})
            result.append(Variant("ar", config.model_copy(update={"models": models})))
        else:
            turn = config.turn.model_copy(update={name: False})
            result.append(Variant(f"no_{name}", config.model_copy(update={"turn": turn})))
    return result


class _SpeculationWatch:
    """Observer: whether a transcript came from speculation (misses are the discarded decodes,
    traced as such)."""

    def __init__(self) -> None:
        self.speculative_hit: bool | None = None

    def on_frame(self, source: str, frame: Frame) -> None:
        if source == "stt" and isinstance(frame, FinalTranscriptFrame) and frame.speculative:
            self.speculative_hit = True  # the answer came from the speculative decode


async def listen_for_reply(
    pause: Callable[[float], Awaitable[None]],
    now_ms: Callable[[], float],
    heard_at_ms: Callable[[], list[float]],
    *,
    true_end_ms: float,
    silent_until_ms: float,
    poll_ms: float = POLL_MS,
) -> None:
    """How every bench's caller waits, whatever carries its call: silent (``pause``) until
    ``silent_until_ms`` at least, then until it has heard a reply after its true end of speech,
    or for ``MAX_REPLY_WAIT_MS`` after it. ``now_ms`` is where the caller is on its own clock;
    ``heard_at_ms``, what it has heard so far (``tooling/emulators/hearing.py``)."""
    while now_ms() < silent_until_ms or (
        first_heard_after(heard_at_ms(), true_end_ms) is None
        and now_ms() - true_end_ms < MAX_REPLY_WAIT_MS
    ):
        await pause(poll_ms)


TurnRunner = Callable[[ManifestClip, Variant, str, int], Awaitable[list[TurnTrace]]]
"""Plays one clip as one user turn through some transport — ``run_turn`` in process, the
Twilio runner of ``cadence.tooling.bench.runners`` over the real endpoint — and returns its traces,
ground truth written in by ``with_ground_truth``."""


async def run_turn(
    clip: ManifestClip, variant: Variant, session_id: str, concurrency: int
) -> list[TurnTrace]:
    """One clip as one user turn, in process at 16 kHz: the pipeline a browser call runs."""
    watch = _SpeculationWatch()
    audio = read_audio(clip.path, SAMPLE_RATE)
    async with answered_call(variant.config, audio, session_id, observers=[watch]) as call:
        pass
    return with_ground_truth(
        call.traces.turns,
        clip,
        variant.name,
        true_end_ms=call.true_end_ms,
        heard_at_ms=call.output.heard_at_ms(),
        annotations={"concurrency": concurrency, "speculative_hit": watch.speculative_hit},
    )


@dataclass(frozen=True)
class AnsweredCall:
    """A bench session whose caller has said one utterance and heard the reply to it."""

    session: VoiceSession
    caller: SimulatedCaller
    output: RecordingAudioOutput
    traces: MemoryTraceSink
    true_end_ms: float
    """The utterance's true end of speech, on the session clock."""


@asynccontextmanager
async def answered_call(
    config: CadenceConfig,
    audio: PCM16,
    session_id: str,
    *,
    observers: Sequence[FrameObserver] = (),
    tools: Sequence[Tool] | None = None,
    tail_ms: float = TAIL_MS,
    poll_ms: float = POLL_MS,
) -> AsyncIterator[AnsweredCall]:
    """A session of its own, in process at 16 kHz (offering ``tools``, else the
    configuration's), in which the caller has
    said ``audio`` after ``LEAD_MS`` of silence, then stayed silent at least ``tail_ms`` and
    until a reply was heard after the true end of speech (``MAX_REPLY_WAIT_MS`` at most);
    cancelled on exit."""
    _, speech_end = speech_bounds_ms(audio, SAMPLE_RATE)
    clock = MonotonicClock()
    traces, output = MemoryTraceSink(), RecordingAudioOutput(clock)
    session = VoiceSession(
        bench_config(config), output, session_id=session_id, output_sample_rate=SAMPLE_RATE,
        clock=clock, tools=tools, trace_sinks=[traces], observers=observers,
    )  # fmt: skip
    await session.start()
    try:
        caller = SimulatedCaller(session)
        await caller.pause(LEAD_MS)
        true_end = caller.position_ms + speech_end
        await caller.say(audio)
        await listen_for_reply(
            caller.pause,
            lambda: caller.position_ms,
            output.heard_at_ms,
            true_end_ms=true_end,
            silent_until_ms=caller.position_ms + tail_ms,
            poll_ms=poll_ms,
        )
        yield AnsweredCall(session, caller, output, traces, true_end)
    finally:
        await session.cancel("bench call measured")


def bench_config(config: CadenceConfig) -> CadenceConfig:
    """``config`` with no trace log of its own: the bench writes the traces it collects."""
    return config.model_copy(update={"tracing": TracingConfig(jsonl_path=None)})


def with_ground_truth(
    traces: list[TurnTrace],
    clip: ManifestClip,
    variant: str,
    *,
    true_end_ms: float,
    heard_at_ms: list[float],
    annotations: dict[str, Annotation],
) -> list[TurnTrace]:
    """The traces of one clip's turn with the truth written in, times on the session's clock:
    the real end of speech as ``user_speech_end``; for each reply sent, when the caller first
    heard it (``audio_heard_first``: the first audible moment in ``heard_at_ms`` from its
    ``audio_out_first`` on; none if the caller never heard it); the reference and what was
    heard of the clip."""
    # The clip is one utterance; if the engine split it into turns, the words of all of them
    # are what it heard of the clip: the last turn carries them, with the reference.
    heard = " ".join(
        str(t.annotations.get("transcript", ""))
        for t in traces
        if t.annotations.get("withdrawn") is not True
    )
    for number, trace in enumerate(traces, start=1):
        if number == len(traces):
            trace.annotations |= {"reference": clip.text, "transcript": heard}
        vad_end = trace.events.get(AnchorEvent.USER_SPEECH_END)
        trace.events[AnchorEvent.USER_SPEECH_END] = true_end_ms
        sent = trace.events.get(AnchorEvent.AUDIO_OUT_FIRST)
        heard_ms = None if sent is None else first_heard_after(heard_at_ms, sent)
        if heard_ms is not None:
            trace.events[AnchorEvent.AUDIO_HEARD_FIRST] = heard_ms
        trace.annotations |= annotations | {
            "variant": variant,
            "clip_id": clip.id,
            "vad_speech_end_ms": vad_end,
            CALLER_MEASURED: True,
        }
    return traces


async def run_bench(
    clips: list[ManifestClip],
    config: CadenceConfig,
    *,
    concurrency: int,
    ablate: list[str],
    transports: dict[str, TurnRunner] | None = None,
) -> list[TurnTrace]:
    """Every clip under every variant through every transport (in process only, unless
    ``transports`` names others); ``concurrency`` sessions of one kind at a time."""
    runners = transports or {"direct": run_turn}
    chosen = variants(config, ablate)
    traces: list[TurnTrace] = []
    counter = itertools.count()
    for start in range(0, len(clips), concurrency):
        group = clips[start : start + concurrency]
        for (transport, runner), variant in itertools.product(runners.items(), chosen):
            named = Variant(_variant_name(transport, variant.name), variant.config)
            results = await asyncio.gather(
                *(
                    runner(clip, named, f"{named.name}-{clip.id}-{next(counter)}", concurrency)
                    for clip in group
                )
            )
            traces += [trace for result in results for trace in result]
    return traces


def _variant_name(transport: str, variant: str) -> str:
    """``full`` in process keeps its name; through another transport it is that transport's
    (``twilio``), and an ablation through it ``twilio+no_speculation``."""
    if transport == "direct":
        return variant
    return transport if variant == "full" else f"{transport}+{variant}"


def write_traces(traces: list[TurnTrace], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(trace.to_json_line() + "\n" for trace in traces))
