"""``cadence bench-voice``: the ears and the mouth measured on real speech, clip by clip.

Each clip is padded with silence (1 s before, 1.5 s after) and streamed through VAD → STT in
20 ms frames at the pace of speech, so every delay is what a caller would wait. The true end
of speech comes from the clip's energy envelope (``cadence.voice.audio.speech_bounds``), not from
the VAD under test. Then each agent reply is streamed word by word into TTS, timing its first
audio. With ``partials_ms`` the STT pass is repeated with live captions on, to show their
cost side by side.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cadence.core.clock import MonotonicClock
from cadence.core.stats import percentiles
from cadence.pipeline.config import CadenceConfig
from cadence.pipeline.frames import (
    AudioInFrame,
    AudioOutFrame,
    EndOfReplyFrame,
    EndpointFrame,
    FinalTranscriptFrame,
    Frame,
    PartialTranscriptFrame,
    SpeculationDiscardedFrame,
    TextPieceFrame,
)
from cadence.pipeline.model_loading import load_stt, load_tts
from cadence.pipeline.pipeline import Pipeline
from cadence.pipeline.stages import STTStage, TTSStage, VADStage
from cadence.report.files import write_report
from cadence.tooling.bench.manifest import ManifestClip
from cadence.voice.audio.speech_bounds import speech_bounds_ms
from cadence.voice.audio.wavfile import read_audio
from cadence.voice.stt import word_error_rate

RATE = 16000
LEAD_MS, TAIL_MS = 1000, 1500


@dataclass(frozen=True)
class ClipResult:
    id: str
    reference: str
    transcript: str
    wer: float
    endpoints: int
    """End-of-turn decisions in the clip; more than one means a reply would have started while
    the caller was still speaking."""
    endpoint_delay_ms: float | None
    """Last endpoint decision − true end of speech, wall clock."""
    vad_end_error_ms: float | None
    """The VAD's end of speech − the true one."""
    stt_after_endpoint_ms: float | None
    """Final transcript − last endpoint (0 when the speculative decode was already done)."""
    decode_ms: float | None
    speculative_hits: int
    speculative_misses: int
    partials: int


class _Timeline:
    """Observer: the frames one stage hands on, with the wall time each was handed on (a frame
    passed along by later stages is counted once, where it was made)."""

    def __init__(self, clock: MonotonicClock) -> None:
        self.clock = clock
        self.frames: list[tuple[float, str, Frame]] = []

    def on_frame(self, source: str, frame: Frame) -> None:
        self.frames.append((self.clock.now_ms(), source, frame))

    def of(self, kind: type[Frame], source: str) -> list[tuple[float, Any]]:
        return [(t, f) for t, s, f in self.frames if s == source and isinstance(f, kind)]


async def measure_clip(
    clip: ManifestClip, config: CadenceConfig, partials_ms: int | None
) -> ClipResult:
    audio = read_audio(clip.path, RATE)
    _, true_end = speech_bounds_ms(audio, RATE)
    true_end += LEAD_MS
    pcm = np.concatenate(
        [
            np.zeros(RATE * LEAD_MS // 1000, np.int16),
            audio,
            np.zeros(RATE * TAIL_MS // 1000, np.int16),
        ]
    )
    clock = MonotonicClock()
    timeline = _Timeline(clock)
    transcriber = load_stt(config.models.stt, config.threads)
    stt = STTStage(transcriber, clock=clock, partials_interval_ms=partials_ms)
    pipeline = Pipeline([VADStage(config.vad), stt], name=clip.id, observers=[timeline])
    await pipeline.start()
    frame = RATE * 20 // 1000
    for i in range(0, len(pcm), frame):
        await clock.sleep_until(i * 1000 / RATE)
        await pipeline.queue(
            AudioInFrame(pcm=pcm[i : i + frame], sample_rate=RATE, timestamp_ms=i * 1000 / RATE)
        )
    await pipeline.end(timeout_s=60)

    endpoints = timeline.of(EndpointFrame, "vad")
    finals = timeline.of(FinalTranscriptFrame, "stt")
    transcript = " ".join(f.text for _, f in finals)
    last_endpoint = endpoints[-1] if endpoints else None
    return ClipResult(
        id=clip.id,
        reference=clip.text,
        transcript=transcript,
        wer=word_error_rate([clip.text], [transcript]),
        endpoints=len(endpoints),
        endpoint_delay_ms=last_endpoint[0] - true_end if last_endpoint else None,
        vad_end_error_ms=last_endpoint[1].speech_end_ms - true_end if last_endpoint else None,
        stt_after_endpoint_ms=(
            finals[-1][0] - last_endpoint[0] if finals and last_endpoint else None
        ),
        decode_ms=finals[-1][1].decode_ms if finals else None,
        speculative_hits=sum(1 for _, f in finals if f.speculative),
        speculative_misses=len(timeline.of(SpeculationDiscardedFrame, "stt")),
        partials=len(timeline.of(PartialTranscriptFrame, "stt")),
    )


async def measure_tts_first_audio(replies: list[str], config: CadenceConfig) -> list[float]:
    """Per reply: ms from its first text piece to its first audio frame."""
    clock = MonotonicClock()
    timeline = _Timeline(clock)
    tts = TTSStage(
        load_tts(config.models.tts, config.threads),
        output_sample_rate=RATE,
        first_phrase_max_words=config.models.tts.first_phrase_max_words,
    )
    pipeline = Pipeline([tts], name="tts-bench", observers=[timeline])
    await pipeline.start()
    firsts = []
    for turn, reply in enumerate(replies):
        timeline.frames.clear()
        started = clock.now_ms()
        for word in reply.split():
            await pipeline.queue(
                TextPieceFrame(text=word + " ", at_ms=clock.now_ms(), reply_index=turn)
            )
        await pipeline.queue(EndOfReplyFrame(reply_index=turn))
        while not timeline.of(EndOfReplyFrame, "tts"):
            await clock.sleep_until(clock.now_ms() + 5)
        firsts.append(timeline.of(AudioOutFrame, "tts")[0][0] - started)
    await pipeline.end(timeout_s=60)
    return firsts


def summarize(results: list[ClipResult]) -> dict[str, Any]:
    def values(name: str) -> list[float]:
        return [v for r in results if (v := getattr(r, name)) is not None]

    hits = sum(r.speculative_hits for r in results)
    misses = sum(r.speculative_misses for r in results)
    return {
        "clips": len(results),
        "wer": word_error_rate([r.reference for r in results], [r.transcript for r in results]),
        "decode_ms": percentiles(values("decode_ms")),
        "endpoint_delay_ms": percentiles(values("endpoint_delay_ms")),
        "vad_end_error_ms": percentiles(values("vad_end_error_ms")),
        "stt_after_endpoint_ms": percentiles(values("stt_after_endpoint_ms")),
        "speculation": {
            "hits": hits,
            "misses": misses,
            "hit_rate": hits / (hits + misses) if hits + misses else None,
        },
        "clips_with_mid_utterance_endpoints": sum(1 for r in results if r.endpoints > 1),
        "partials": sum(r.partials for r in results),
    }


def render_markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Voice stages on real speech",
        "",
        f"Machine: {report['machine']}. Command: `{report['command']}`.",
        f"Started {report['started']}; {report['clip_count']} clips streamed in real time.",
        "",
        "| pass | WER | decode p50 / p95 | endpoint delay p50 / p95 | STT after endpoint p50 / p95 "
        "| speculation hits / misses | clips cut mid-utterance | partials |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, summary in report["passes"].items():
        spec, cut = summary["speculation"], summary["clips_with_mid_utterance_endpoints"]
        lines.append(
            f"| {name} | {summary['wer']:.3f} | {_ms(summary['decode_ms'])} "
            f"| {_ms(summary['endpoint_delay_ms'])} | {_ms(summary['stt_after_endpoint_ms'])} "
            f"| {spec['hits']} / {spec['misses']} | {cut} "
            f"| {summary['partials']} |"
        )
    tts = report["tts_first_audio_ms"]
    lines += [
        "",
        f"TTS first audio of {report['tts_replies']} agent replies (first phrase): "
        f"p50 {tts['p50']:.0f} ms, p95 {tts['p95']:.0f} ms, max {tts['max']:.0f} ms.",
        "",
        "## Per clip (captions off)",
        "",
        "| clip | WER | endpoints | endpoint delay | VAD end error | STT after endpoint | decode |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report["clips"]:
        lines.append(
            f"| {r['id']} | {r['wer']:.2f} | {r['endpoints']} | {_one(r['endpoint_delay_ms'])} "
            f"| {_one(r['vad_end_error_ms'])} | {_one(r['stt_after_endpoint_ms'])} "
            f"| {_one(r['decode_ms'])} |"
        )
    return "\n".join(lines) + "\n"


def _ms(p: dict[str, float | None]) -> str:
    return f"{_one(p['p50'])} / {_one(p['p95'])}"


def _one(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f} ms"


async def run_voice_bench(
    clips: list[ManifestClip],
    replies: list[str],
    config: CadenceConfig,
    *,
    partials_ms: int | None,
    machine: str,
    command: str,
) -> dict[str, Any]:
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    load_stt(config.models.stt, config.threads)  # load before the clock starts on the first clip
    passes: dict[str, list[ClipResult]] = {"captions off": []}
    for clip in clips:
        passes["captions off"].append(await measure_clip(clip, config, None))
    if partials_ms is not None:
        passes[f"captions every {partials_ms} ms"] = [
            await measure_clip(clip, config, partials_ms) for clip in clips
        ]
    tts = await measure_tts_first_audio(replies, config)
    return {
        "machine": machine,
        "command": command,
        "started": started,
        "clip_count": len(clips),
        "passes": {name: summarize(results) for name, results in passes.items()},
        "tts_first_audio_ms": percentiles(tts),
        "tts_replies": len(replies),
        "clips": [asdict(r) for r in passes["captions off"]],
    }


def write_voice_bench(report: dict[str, Any], out: Path) -> None:
    """``voice_bench.json`` and ``voice_bench.md`` into ``out``."""
    write_report(out, {"voice_bench.json": report, "voice_bench.md": render_markdown(report)})
