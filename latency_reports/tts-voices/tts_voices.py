"""``python latency_reports/tts-voices/tts_voices.py``: the embedded voices side by side.

For each voice (hibari's ``heart``, Piper's ``en_US-joe-medium``) on one and on two
onnxruntime threads, on the agent replies of ``tests/data/dialogue/agent_replies.txt`` (30
turns of the Schema-Guided Dialogue dev split):

* **First phrase**: the reply's first phrase as the splitter cuts it at 3, 4 and 6 words at
  most, synthesized alone: wall time and the process's CPU time (nothing else runs in it).
  The voices take turns phrase by phrase, so both see the same load on a shared machine.
* **Through the TTS stage**: each reply streamed into the real ``TTSStage`` word by word at
  once, the ms to its first audio frame (``cadence bench-voice``'s TTS figure) — the TTS first
  audio of a call without the generator's time; the voices take turns reply set by reply set.
* **Round trip**: every reply, phrase by phrase as the TTS stage speaks it, the voice's noise
  seeded (the same audio every run), decoded by the project's STT (the configured whisper)
  at 16 kHz and through a telephone's 8 kHz: WER against the text.

Writes ``report.json`` and ``report.md`` into ``--out``. With ``--loads DIR DIR …`` it
compares instead the ``cadence loadtest`` runs in those directories (one per voice, every
level's ``level-N.jsonl`` and ``.json``) into ``loads.md``: per level, the TTS first audio
as issue 18 measured it (the reply's first text → its first audio, ahead of the end-of-turn
decision or not), the caller's voice-to-voice and decision → sound, and the CPU per call.

Measured once for issue 33 (docs/voice.md, "The voices") and kept beside its report, this
folder (not part of any package or the test suite). From the repository root:
``python latency_reports/tts-voices/tts_voices.py -o latency_reports/tts-voices --rounds 3``;
in ``load/``: ``python ../tts_voices.py -o . --loads piper hibari piper-2 hibari-2 …``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from cadence.core.stats import percentiles
from cadence.pipeline.config import CadenceConfig
from cadence.pipeline.model_loading import load_stt
from cadence.report.files import write_report
from cadence.tooling.bench.voice_bench import measure_tts_first_audio
from cadence.voice.audio import resample
from cadence.voice.stt import word_error_rate
from cadence.voice.tts import PhraseSplitter, Synthesizer, load_synthesizer

VOICES = {"hibari": "embedded:hibari-heart", "piper": "embedded:en_US-joe-medium"}
REPLIES = Path("tests/data/dialogue/agent_replies.txt")
WORDS = (3, 4, 6)
THREADS = (1, 2)


def first_phrases(replies: list[str], max_words: int) -> list[str]:
    """Each reply's first phrase, as the TTS stage cuts it from streamed words."""
    phrases = []
    for reply in replies:
        splitter = PhraseSplitter(max_words)
        cut = [p for word in reply.split() for p in splitter.feed(word + " ")]
        phrases.append(cut[0] if cut else reply)
    return phrases


def _timed(synthesizer: Synthesizer, text: str) -> tuple[float, float, float]:
    """Wall ms, CPU ms and seconds of audio of one synthesis."""
    wall, cpu = time.perf_counter(), time.process_time()
    audio = sum(len(pcm) for pcm in synthesizer.synthesize_blocking(text))
    return (
        (time.perf_counter() - wall) * 1000.0,
        (time.process_time() - cpu) * 1000.0,
        audio / synthesizer.sample_rate,
    )


def first_phrase_costs(replies: list[str], rounds: int) -> dict[str, Any]:
    """Per voice, threads and first-phrase length: wall and CPU ms per phrase, real-time
    factor; every (voice, threads) in turn on each phrase."""
    synthesizers = {(v, t): load_synthesizer(VOICES[v], t) for v in VOICES for t in THREADS}
    for synthesizer in synthesizers.values():
        _timed(synthesizer, "Warming up the voice.")
    samples: dict[tuple[str, int, int], list[tuple[float, float, float]]] = {}
    for _ in range(rounds):
        for words in WORDS:
            for phrase in first_phrases(replies, words):
                for (voice, threads), synthesizer in synthesizers.items():
                    samples.setdefault((voice, threads, words), []).append(
                        _timed(synthesizer, phrase)
                    )
    rows = {}
    for (voice, threads, words), timings in samples.items():
        wall, cpu, audio = (np.array(column) for column in zip(*timings, strict=True))
        rows[f"{voice}/{threads}/{words}"] = {
            "voice": voice,
            "threads": threads,
            "max_words": words,
            "phrases": len(timings),
            "wall_ms": percentiles(list(wall)),
            "cpu_ms": percentiles(list(cpu)),
            "realtime_factor": float(audio.sum() / (wall.sum() / 1000.0)),
        }
    return rows


def stage_first_audio(replies: list[str], rounds: int) -> dict[str, Any]:
    """Per voice (its default threads): the TTS stage's first audio of each reply."""
    samples: dict[str, list[float]] = {voice: [] for voice in VOICES}
    for _ in range(rounds):
        for voice, name in VOICES.items():
            config = CadenceConfig(models={"tts": {"voice": name}})
            samples[voice] += asyncio.run(measure_tts_first_audio(replies, config))
    return {voice: percentiles(values) for voice, values in samples.items()}


def round_trip(replies: list[str]) -> dict[str, Any]:
    """Per voice: WER of the configured whisper on each reply's audio, at 16 kHz and through
    8 kHz, with every hypothesis."""
    transcriber = load_stt(CadenceConfig().models.stt, CadenceConfig().threads)
    results: dict[str, Any] = {}
    for voice, name in VOICES.items():
        synthesizer = load_synthesizer(name)
        wide, phone = [], []
        for reply in replies:
            audio = np.concatenate(
                [
                    pcm
                    for phrase in PhraseSplitter().phrases(reply)
                    for pcm in synthesizer.synthesize_blocking(phrase, varied=False)
                ]
            )
            at_16k = resample(audio, synthesizer.sample_rate, 16000)
            at_8k = resample(resample(audio, synthesizer.sample_rate, 8000), 8000, 16000)
            wide.append(transcriber.transcribe_blocking(at_16k).text)
            phone.append(transcriber.transcribe_blocking(at_8k).text)
        results[voice] = {
            "wer_16k": word_error_rate(replies, wide),
            "wer_8k": word_error_rate(replies, phone),
            "hypotheses_16k": wide,
            "hypotheses_8k": phone,
        }
    return results


def _loads_row(label: str, levels: list[Path]) -> str:
    """One row: the traces of ``levels`` (``level-N.jsonl`` files of one load) pooled."""
    traces = [
        json.loads(line) for level in levels for line in level.read_text().splitlines() if line
    ]
    answered = [  # a withdrawn turn's reply was never heard: the caller went on
        t
        for t in traces
        if "audio_heard_first" in t["events"] and not t["annotations"].get("withdrawn")
    ]
    tts = [
        t["events"]["tts_first_audio"] - t["events"]["llm_first_emit"]
        for t in answered
        if "tts_first_audio" in t["events"] and "llm_first_emit" in t["events"]
    ]
    v2v = [t["latencies_ms"]["heard_voice_to_voice"] for t in answered]
    sound = [t["events"]["audio_heard_first"] - t["events"]["endpoint"] for t in answered]
    results = [json.loads(level.with_suffix(".json").read_text()) for level in levels]
    calls = sum(r["calls"] for r in results)
    cpu = [r.get("cpu_s") for r in results]
    per_call = "–" if None in cpu or not calls else f"{sum(c or 0.0 for c in cpu) / calls:.2f}"
    cells = [percentiles(values) for values in (tts, v2v, sound)]
    return (
        f"| {label} | {results[0]['sessions']} | {calls} | {len(answered)} "
        + "".join(f"| {_ms(c['p50'])} | {_ms(c['p95'])} " for c in cells)
        + f"| {per_call} |"
    )


def render_loads(directories: list[Path]) -> str:
    """Side by side, level by level, the load tests of ``directories``; then, where a voice
    has several (``piper``, ``piper-2``: rounds), all of its rounds pooled."""
    levels = sorted(
        {int(p.stem.split("-")[1]) for d in directories for p in d.glob("level-*.jsonl")}
    )
    voices: dict[str, list[Path]] = {}
    for directory in directories:
        voices.setdefault(re.sub(r"-\d+$", "", directory.name), []).append(directory)
    header = [
        "| voice | calls at once | calls | turns answered | TTS first audio p50 | p95 "
        "| voice-to-voice p50 | p95 | decision → sound p50 | p95 | CPU per call (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines = list(header)
    for level in levels:
        for directory in directories:
            if (path := directory / f"level-{level}.jsonl").exists():
                lines.append(_loads_row(directory.name, [path]))
    if any(len(rounds) > 1 for rounds in voices.values()):
        lines += ["", "All rounds pooled:", "", *header]
        for level in levels:
            for voice, rounds in voices.items():
                paths = [p for d in rounds if (p := d / f"level-{level}.jsonl").exists()]
                if paths:
                    lines.append(_loads_row(voice, paths))
    return "\n".join(lines) + "\n"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def render(report: dict[str, Any]) -> str:
    lines = [
        "# The embedded voices side by side\n",
        f"Command: `{report['command']}`.  \nMachine: {report['machine']}.  \n"
        f"{report['replies']} agent replies (`{REPLIES}`), {report['rounds']} rounds; the voices "
        "take turns phrase by phrase, so both see the same load (the machine was shared).\n",
        "## The first phrase alone\n",
        "| voice | threads | first phrase ≤ words | wall p50 | wall p95 | CPU p50 | CPU p95 "
        "| real-time factor |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["first_phrase"].values():
        lines.append(
            f"| {row['voice']} | {row['threads']} | {row['max_words']} "
            f"| {_ms(row['wall_ms']['p50'])} | {_ms(row['wall_ms']['p95'])} "
            f"| {_ms(row['cpu_ms']['p50'])} | {_ms(row['cpu_ms']['p95'])} "
            f"| {row['realtime_factor']:.0f}× |"
        )
    lines += [
        "\nTimes in ms; CPU is the process's (every onnxruntime thread and the vocoder).\n",
        "## Through the TTS stage\n",
        "Each reply streamed into the TTS stage word by word, at once: ms to its first audio "
        "(the voice's default threads).\n",
        "| voice | first audio p50 | p95 | p99 |",
        "|---|---:|---:|---:|",
        *(
            f"| {voice} | {_ms(row['p50'])} | {_ms(row['p95'])} | {_ms(row['p99'])} |"
            for voice, row in report["stage_first_audio"].items()
        ),
        "",
        "## Round trip through the project's STT\n",
        "| voice | WER at 16 kHz | WER through 8 kHz |",
        "|---|---:|---:|",
    ]
    for voice, row in report["round_trip"].items():
        lines.append(f"| {voice} | {row['wer_16k']:.3f} | {row['wer_8k']:.3f} |")
    lines.append("\nEvery hypothesis is in `report.json`.\n")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", "-o", type=Path, required=True)
    parser.add_argument("--loads", type=Path, nargs="+", help="compare these load-test runs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--replies", type=Path, default=REPLIES)
    parser.add_argument("--skip-round-trip", action="store_true")
    args = parser.parse_args()
    if args.loads:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "loads.md").write_text(text := render_loads(args.loads))
        print(text)
        return
    replies = [line.strip() for line in args.replies.read_text().splitlines() if line.strip()]
    report: dict[str, Any] = {
        "command": shlex.join(
            ["python", "latency_reports/tts-voices/tts_voices.py", *sys.argv[1:]]
        ),
        "machine": f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start",
        "replies": len(replies),
        "rounds": args.rounds,
        "first_phrase": first_phrase_costs(replies, args.rounds),
        "stage_first_audio": stage_first_audio(replies, args.rounds),
        "round_trip": {} if args.skip_round_trip else round_trip(replies),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_report(args.out, {"report.json": report, "report.md": render(report)})
    print(render(report))


if __name__ == "__main__":
    main()
