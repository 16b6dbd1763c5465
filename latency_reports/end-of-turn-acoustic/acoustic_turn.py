"""Is an acoustic end-of-turn signal worth it? Smart Turn v3.2 and two prosody cues on real speech.

Every clip of the speech manifest gives *complete* samples (the clip as recorded, and the clip
cut at its end of speech) and up to three *incomplete* ones: the clip cut after a word a
quarter, half and three quarters of the way into the sentence. Cuts, word timestamps and the
pause that follows a cut (the clip's own background, never digital zero) come from the
turn-taking benchmark's recipe (``paused_clips.py``); the pause is 0.2 s, the VAD's endpoint
silence, when an end-of-turn decision is asked for (0 and 0.5 s are measured too). Three
channels:

* ``wideband_16k``: the clips recorded wideband, at 16 kHz;
* ``telephone_8k``: the clips recorded on a telephone band, read at 8 kHz, through μ-law and
  up to 16 kHz with the pipeline's resampler (``voice/audio/resample.py``);
* ``wideband_via_8k``: the wideband clips down to 8 kHz, through μ-law and back up.

Smart Turn v3.2 (the ONNX file of the ``pipecat-ai`` wheel, located in the installed
distribution without importing ``pipecat``, which needs its own dependencies; the whisper
log-mel features computed here, identical to pipecat's) scores each sample on one onnxruntime
thread; the prosody cues are the slopes of pitch and level over the last 0.5 s of speech. Where
the project's text end-of-turn model loads, it scores whisper's words of each sample, and text
and audio are combined by rules fixed beforehand and by logistic fits evaluated
leave-one-clip-out. The verdict is in docs/end-of-turn.md.

    python latency_reports/end-of-turn-acoustic/acoustic_turn.py \\
        --out latency_reports/end-of-turn-acoustic

Rejected work, kept for the record beside its report (this folder's ``README.md`` and
``metrics.json``): not part of any package or the test suite, linted and type-checked with the
rest of the tree. Needs ``pip install onnxruntime==1.32.0`` (the version it was measured with,
unless the voices' dependencies have brought it already) and ``pip install --no-deps
pipecat-ai==1.14.0`` (the model file; nothing of it is imported).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import math
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from cadence.core.stats import auc, median, percentile
from cadence.report.files import write_report
from cadence.tooling.bench.manifest import read_manifest
from cadence.tooling.bench.pause_points import (
    Word,
    align_words,
    ends_sentence,
    find_cut,
    is_unfinished,
    read_words,
)
from cadence.tooling.bench.paused_clips import noise_bed
from cadence.voice.audio.g711 import ulaw_decode, ulaw_encode
from cadence.voice.audio.pcm import PCM16, pcm16_to_float
from cadence.voice.audio.resample import resample
from cadence.voice.audio.speech_bounds import speech_bounds_ms
from cadence.voice.audio.wavfile import read_audio

MANIFEST = Path("tests/data/speech/manifest.jsonl")
WORDS = Path("tests/data/speech/words.jsonl")
RATE = 16000
PAUSE_S = 0.2
"""The pause after each cut (the clip's own background, ``paused_clips.noise_bed``): the
VAD's endpoint silence, when an end-of-turn decision is asked for (also measured: 0 and 0.5 s)."""
THRESHOLD = 0.5
PROSODY = ("pitch_slope", "level_slope")
HOLD = 0.95
"""Share of the incomplete samples a score must hold (issue 17's target) at the operating point
``classify`` also reports."""

PIPECAT = "pipecat-ai==1.14.0"
MODEL_FILE = "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"
WINDOW_S = 8
"""Smart Turn hears the last 8 s, zero-padded in front when shorter."""

Float = npt.NDArray[np.float64]


# --- Smart Turn v3.2 ------------------------------------------------------------------------


def smart_turn_model_path() -> Path:
    """The ONNX file of the installed ``pipecat-ai`` distribution (nothing is imported)."""
    try:
        path = Path(str(importlib.metadata.distribution("pipecat-ai").locate_file(MODEL_FILE)))
    except importlib.metadata.PackageNotFoundError:
        path = None
    if path is None or not path.is_file():
        raise SystemExit(
            f"Smart Turn v3.2 is not installed: `pip install --no-deps {PIPECAT}` "
            "(its ONNX file and nothing else is used)"
        )
    return path


def _mel_filters() -> Float:
    """Whisper's 80 Slaney mel filters over the 201 bins of a 400-point FFT at 16 kHz."""

    def to_mel(hz: Float) -> Float:
        log = hz >= 1000.0
        mel = 3.0 * hz / 200.0
        mel[log] = 15.0 + np.log(hz[log] / 1000.0) * (27.0 / np.log(6.4))
        return mel

    def to_hz(mel: Float) -> Float:
        log = mel >= 15.0
        hz = 200.0 * mel / 3.0
        hz[log] = 1000.0 * np.exp(np.log(6.4) / 27.0 * (mel[log] - 15.0))
        return hz

    low, high = to_mel(np.array([0.0, RATE / 2]))
    edges = to_hz(np.linspace(low, high, 82))
    bins = np.linspace(0, RATE // 2, 201)
    slopes = edges[None, :] - bins[:, None]
    down = -slopes[:, :-2] / np.diff(edges)[:-1]
    up = slopes[:, 2:] / np.diff(edges)[1:]
    filters = np.maximum(0.0, np.minimum(down, up))
    filters *= 2.0 / (edges[2:82] - edges[:80])
    return filters


_MEL = _mel_filters()
_HANN = np.hanning(401)[:-1]


def log_mel(audio: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Smart Turn's input: the waveform normalised, then whisper's log-mel (80 × 800), as
    ``transformers.WhisperFeatureExtractor(chunk_length=8)`` computes it."""
    x = audio.astype(np.float32)
    x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    padded = np.pad(x.astype(np.float64), (200, 200), mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, 400)[::160]
    power = np.abs(np.fft.rfft(frames * _HANN, axis=-1)) ** 2
    spec = np.log10(np.maximum(1e-10, _MEL.T @ power.T))[:, :-1]
    spec = np.maximum(spec, spec.max() - 8.0)
    features: npt.NDArray[np.float32] = ((spec + 4.0) / 4.0).astype(np.float32)
    return features


def last_window(pcm: PCM16) -> npt.NDArray[np.float32]:
    """The last 8 s of 16 kHz PCM as float, zero-padded in front."""
    n = WINDOW_S * RATE
    samples = pcm16_to_float(pcm[-n:])
    return np.pad(samples, (n - len(samples), 0))


class SmartTurn:
    def __init__(self, path: Path) -> None:
        options = ort.SessionOptions()
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.inter_op_num_threads = 1
        options.intra_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session = ort.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )

    def features(self, pcm: PCM16) -> npt.NDArray[np.float32]:
        return log_mel(last_window(pcm))[None]

    def run(self, features: npt.NDArray[np.float32]) -> float:
        out = self._session.run(None, {"input_features": features})[0]
        return float(np.asarray(out).reshape(-1)[0])

    def score(self, pcm: PCM16) -> float:
        """P(turn complete) of 16 kHz PCM16 that ends where the decision is asked."""
        return self.run(self.features(pcm))


# --- prosody --------------------------------------------------------------------------------


def prosody(pcm: PCM16, end_s: float) -> dict[str, float | None]:
    """Slopes over the last 0.5 s of speech before ``end_s``: pitch (semitones/s, voiced frames
    by autocorrelation, 60–400 Hz) and level (dB/s). ``None`` where too little is voiced."""
    hop, win = RATE // 100, RATE // 25
    stop = int(end_s * RATE)
    start = max(0, stop - RATE // 2)
    x = pcm16_to_float(pcm[start:stop]).astype(np.float64)
    if len(x) < win + 5 * hop:
        return {"pitch_slope": None, "level_slope": None}
    frames = np.lib.stride_tricks.sliding_window_view(x, win)[::hop]
    level = 10 * np.log10((frames**2).mean(axis=1) + 1e-10)
    t = np.arange(len(frames)) * 0.01
    loud = level > level.max() - 30
    level_slope = float(np.polyfit(t[loud], level[loud], 1)[0]) if loud.sum() >= 5 else None
    lo, hi = RATE // 400, RATE // 60
    f0 = np.full(len(frames), np.nan)
    for i, frame in enumerate(frames):
        if not loud[i]:
            continue
        f = frame - frame.mean()
        ac = np.correlate(f, f, mode="full")[win - 1 :]
        if ac[0] <= 0:
            continue
        ac = ac / ac[0]
        lag = lo + int(np.argmax(ac[lo:hi]))
        if ac[lag] > 0.5:
            f0[i] = RATE / lag
    voiced = ~np.isnan(f0)
    pitch_slope = None
    if voiced.sum() >= 5:
        semitones = 12 * np.log2(f0[voiced] / median(f0[voiced]))
        keep = np.abs(semitones) < 7  # octave errors out
        if keep.sum() >= 5:
            pitch_slope = float(np.polyfit(t[voiced][keep], semitones[keep], 1)[0])
    return {"pitch_slope": pitch_slope, "level_slope": level_slope}


# --- samples --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Clip:
    id: str
    wide: PCM16 | None
    """16 kHz audio of a clip recorded wideband."""
    phone: PCM16 | None
    """8 kHz audio of a clip recorded on a telephone band."""
    words: list[Word]


@dataclass
class Sample:
    clip: str
    channel: str
    kind: str
    """``clip`` (the whole clip as recorded), ``end`` (cut at the end of speech, then the pause)
    or ``mid`` (cut after a word mid-sentence, then the pause)."""
    pause_s: float
    words: int
    of: int
    unfinished: bool
    """A mid-sentence cut after a word no English sentence ends on (``paused_clips``)."""
    text: str
    cut_s: float
    pcm: PCM16 = field(repr=False)
    scores: dict[str, float | None] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return self.kind != "mid"


def normalise_words(words: Sequence[Word]) -> str:
    """What the text model reads: whisper's words, lower case, without punctuation (so that
    a final full stop gives nothing away)."""
    return " ".join(n for n in (re.sub(r"[^\w']+", "", w.text.lower()) for w in words) if n)


def mid_points(words: Sequence[Word]) -> list[int]:
    """Word counts of the mid-sentence prefixes: a quarter, half and three quarters of the
    way in, leaving at least two words out, never after a word that ends a sentence."""
    n = len(words)
    ks = {round(n / 4), round(n / 2), round(3 * n / 4)}
    return sorted(k for k in ks if 1 <= k <= n - 2 and not ends_sentence(words[k - 1].text))


def end_of_speech_s(pcm: PCM16, rate: int, words: Sequence[Word]) -> float:
    """The later of the energy end of speech and whisper's end of the last word (the energy
    rule alone clips soft final consonants), within the clip."""
    _, end_ms = speech_bounds_ms(pcm, rate)
    return min(len(pcm) / rate, max(end_ms / 1000, words[-1].end_s))


def to_16k(pcm: PCM16, rate: int, via_8k: bool) -> PCM16:
    """The telephone path: to 8 kHz (if needed), μ-law both ways, up to 16 kHz."""
    if not via_8k:
        return pcm
    narrow = pcm if rate == 8000 else resample(pcm, rate, 8000)
    return resample(ulaw_decode(ulaw_encode(narrow)), 8000, RATE)


def clip_samples(
    clip: Clip, channel: str, pcm: PCM16, rate: int, via_8k: bool, pauses: Sequence[float]
) -> list[Sample]:
    n = len(clip.words)
    everything = normalise_words(clip.words)
    bed = noise_bed(pcm, rate, int(max(pauses) * rate))
    cuts = [("end", n, end_of_speech_s(pcm, rate, clip.words), everything, False)]
    for k in mid_points(clip.words):
        at = find_cut(pcm, rate, clip.words, k - 1).at_s
        text = normalise_words(clip.words[:k])
        cuts.append(("mid", k, at, text, is_unfinished(clip.words[k - 1].text)))
    samples = [
        Sample(
            clip.id,
            channel,
            "clip",
            0.0,
            n,
            n,
            False,
            everything,
            round(len(pcm) / rate, 3),
            to_16k(pcm, rate, via_8k),
        )
    ]
    for pause in pauses:
        for kind, k, at, text, unfinished in cuts:
            audio = np.concatenate([pcm[: round(at * rate)], bed[: round(pause * rate)]])
            samples.append(
                Sample(
                    clip.id,
                    channel,
                    kind,
                    pause,
                    k,
                    n,
                    unfinished,
                    text,
                    round(at, 3),
                    to_16k(audio, rate, via_8k),
                )
            )
    return samples


def build_samples(clips: Sequence[Clip], pauses: Sequence[float]) -> list[Sample]:
    samples = []
    for clip in clips:
        if clip.wide is not None:
            samples += clip_samples(clip, "wideband_16k", clip.wide, RATE, False, pauses)
            samples += clip_samples(clip, "wideband_via_8k", clip.wide, RATE, True, pauses)
        if clip.phone is not None:
            samples += clip_samples(clip, "telephone_8k", clip.phone, 8000, True, pauses)
    return samples


# --- inputs ---------------------------------------------------------------------------------


def read_clips(manifest: Path, words_path: Path) -> tuple[list[Clip], str]:
    """The manifest's clips with their word timestamps (``words.jsonl`` when there is one,
    else computed now by the same recipe, ``paused_clips.align_words``)."""
    rows = [json.loads(line) for line in manifest.read_text(encoding="utf-8").splitlines() if line]
    if words_path.is_file():
        words, source = read_words(words_path), str(words_path)
    else:
        aligned = align_words(read_manifest(manifest))
        words = {r["id"]: [Word(w, s, e) for w, s, e in r["words"]] for r in aligned}
        source = "computed: paused_clips.align_words (faster-whisper, models.stt)"
    clips = []
    for r in rows:
        if len(words.get(r["id"], [])) < 2:
            continue
        telephone = bool(r.get("telephone_band")) or r.get("sample_rate_orig", RATE) < RATE
        path_8k = r.get("file_8k")
        phone = read_audio(manifest.parent / path_8k, 8000) if path_8k else None
        wide = None if telephone else read_audio(manifest.parent / r["file"], RATE)
        if wide is not None or phone is not None:
            # (a telephone-band clip in a 16 kHz file only belongs to neither channel)
            clips.append(Clip(r["id"], wide, phone, words[r["id"]]))
    return clips, source


class TextModel(Protocol):
    threshold: float

    def score(self, text: str) -> float: ...


def load_text_model() -> tuple[TextModel | None, str]:
    """The project's text end-of-turn model, or ``None`` and why not."""
    try:
        module = importlib.import_module("cadence.voice.turn")
        loader: Callable[[], TextModel] = module.TextEndOfTurnModel.load
        return loader(), "cadence.voice.turn.TextEndOfTurnModel (shipped weights)"
    except Exception as exc:  # not there yet, or no weights: the audio is measured alone
        return None, f"unavailable ({type(exc).__name__}: {exc})"


def text_score(model: TextModel, text: str) -> float:
    """The text model's P(complete), shifted in logit so that its own default threshold
    falls at ``THRESHOLD`` like Smart Turn's (one threshold for every score and rule)."""
    return 1 / (1 + math.exp(-(logit(model.score(text)) - logit(model.threshold))))


# --- statistics -----------------------------------------------------------------------------


def wilson(hits: int, n: int) -> list[float]:
    """The 95 % Wilson interval of a proportion."""
    if n == 0:
        return [0.0, 1.0]
    p, z = hits / n, 1.96
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [round(centre - half, 3), round(centre + half, 3)]


def separation(positive: Sequence[float], negative: Sequence[float]) -> float | None:
    """P(a complete sample scores above an incomplete one), ties half: ``core.stats.auc``,
    rounded; ``None`` without both."""
    if not positive or not negative:
        return None
    labels = [1] * len(positive) + [0] * len(negative)
    return round(auc([*positive, *negative], labels), 3)


DISTRIBUTION = {"min": 0, "p10": 10, "p25": 25, "median": 50, "p75": 75, "p90": 90, "max": 100}


def distribution(values: Sequence[float]) -> dict[str, float]:
    """``values``' percentiles (``core.stats.percentile``), rounded as numpy rounds (as the
    report was written); empty without values."""
    if not values:
        return {}
    return {name: float(np.round(percentile(values, q), 3)) for name, q in DISTRIBUTION.items()}


def classify(complete: Sequence[float], incomplete: Sequence[float]) -> dict[str, Any]:
    """Accuracy at ``THRESHOLD`` (complete: above it) on both sides, AUC, distributions."""
    right = sum(p > THRESHOLD for p in complete)
    held = sum(p <= THRESHOLD for p in incomplete)
    rate_c = right / len(complete) if complete else math.nan
    rate_i = held / len(incomplete) if incomplete else math.nan
    # The operating point the wait rule needs: the lowest threshold that still holds 95 % of
    # the incomplete samples, and how many complete ones clear it (threshold-free: fair to a
    # score whose 0.5 is miscalibrated on this audio). The threshold is one of the incomplete
    # scores, an order statistic (numpy's "higher" 95th percentile, as the report was
    # measured), not an interpolated percentile, which could fall short of holding 95 %.
    strict = sorted(incomplete)[math.ceil(HOLD * (len(incomplete) - 1))] if incomplete else math.nan
    return {
        f"complete_right_holding_{HOLD:.0%}_incomplete": (
            f"{sum(p > strict for p in complete)}/{len(complete)}"
        ),
        "complete_right": f"{right}/{len(complete)}",
        "complete_accuracy": None if math.isnan(rate_c) else round(rate_c, 3),
        "complete_ci95": wilson(right, len(complete)),
        "incomplete_right": f"{held}/{len(incomplete)}",
        "incomplete_accuracy": None if math.isnan(rate_i) else round(rate_i, 3),
        "incomplete_ci95": wilson(held, len(incomplete)),
        "balanced_accuracy": (
            None if math.isnan(rate_c + rate_i) else round((rate_c + rate_i) / 2, 3)
        ),
        "auc": separation(complete, incomplete),
        "complete_scores": distribution(complete),
        "incomplete_scores": distribution(incomplete),
    }


def scores(samples: Sequence[Sample], key: str, **match: Any) -> list[float]:
    chosen = (s for s in samples if all(getattr(s, k) == v for k, v in match.items()))
    return [v for v in (s.scores.get(key) for s in chosen) if v is not None]


def logit(p: float) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return math.log(p / (1 - p))


def fit_logistic(x: Float, y: Float, l2: float = 1.0) -> Float:
    """Weights (bias last) of an L2-regularised logistic regression, by Newton's method."""
    a = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(a.shape[1])
    penalty = np.eye(a.shape[1]) * l2
    penalty[-1, -1] = 0.0
    for _ in range(50):
        p = 1 / (1 + np.exp(-a @ w))
        hessian = a.T @ (a * (p * (1 - p))[:, None]) + penalty
        step = np.linalg.solve(hessian, a.T @ (p - y) + penalty @ w)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def feature(s: Sample, key: str) -> float:
    """A score as a fit's input: probabilities as logits, slopes as they are (an unvoiced end,
    with no slope, as flat)."""
    value = s.scores.get(key)
    if key in PROSODY:
        return value or 0.0
    return logit(value or 0.0)


def leave_one_clip_out(samples: Sequence[Sample], keys: Sequence[str], out: str) -> None:
    """``out``: a logistic fit on ``keys`` (complete = the ``end`` cuts, incomplete = the
    prefixes; inputs standardised on the training clips), each clip scored by the fit on all
    the other clips."""
    used = [s for s in samples if s.kind != "clip" and all(k in s.scores for k in keys)]
    x_all = np.array([[feature(s, k) for k in keys] for s in used])
    y_all = np.array([float(s.complete) for s in used])
    for clip in sorted({s.clip for s in used}):
        train = np.array([s.clip != clip for s in used])
        mean, std = x_all[train].mean(axis=0), x_all[train].std(axis=0) + 1e-9
        x = (x_all - mean) / std
        w = fit_logistic(x[train], y_all[train])
        for s, row in zip(used, x, strict=True):
            if s.clip == clip:
                s.scores[out] = 1 / (1 + math.exp(-float(np.dot(w[:-1], row) + w[-1])))


def combine(samples: Sequence[Sample]) -> None:
    """Rules fixed before looking at any score: the mean, the geometric mean, and the audio
    as a tie-breaker only where the text is unsure (0.3–0.7)."""
    for s in samples:
        t, a = s.scores.get("text"), s.scores.get("smart_turn")
        if t is None or a is None:
            continue
        s.scores["mean"] = (t + a) / 2
        s.scores["geometric_mean"] = math.sqrt(t * a)
        s.scores["text_then_audio"] = a if 0.3 <= t <= 0.7 else t


# --- timing ---------------------------------------------------------------------------------


def time_inference(model: SmartTurn, pcm: PCM16, runs: int) -> dict[str, Any]:
    """Features and ONNX run of one decision, ``runs`` times on one thread (after warm-up)."""
    for _ in range(10):
        model.score(pcm)
    features_ms, onnx_ms = [], []
    for _ in range(runs):
        start = time.perf_counter()
        features = model.features(pcm)
        middle = time.perf_counter()
        model.run(features)
        features_ms.append((middle - start) * 1000)
        onnx_ms.append((time.perf_counter() - middle) * 1000)

    def summary(values: Sequence[float]) -> dict[str, float]:
        return {
            name: float(np.round(percentile(values, q), 2))
            for name, q in {"p10": 10, "median": 50, "p90": 90}.items()
        }

    return {
        "runs": runs,
        "features_ms": summary(features_ms),
        "onnx_ms": summary(onnx_ms),
        "total_ms": summary([f + o for f, o in zip(features_ms, onnx_ms, strict=True)]),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
    }


# --- main -----------------------------------------------------------------------------------


SCORES = (
    "smart_turn",
    "text",
    "mean",
    "geometric_mean",
    "text_then_audio",
    "logistic_loco",
    "text_prosody_loco",
    "prosody_loco",
)


def channel_report(group: Sequence[Sample], pauses: Sequence[float]) -> dict[str, Any]:
    at = {"pause_s": PAUSE_S}
    keys = [k for k in SCORES if any(k in s.scores for s in group)]
    report: dict[str, Any] = {"clips": len({s.clip for s in group})}
    ends, mids = {"kind": "end", **at}, {"kind": "mid", **at}
    report[f"pause_{PAUSE_S}s"] = {
        k: {
            "end_vs_mid": classify(scores(group, k, **ends), scores(group, k, **mids)),
            "clip_vs_mid": classify(scores(group, k, kind="clip"), scores(group, k, **mids)),
            "end_vs_unfinished_mid": classify(
                scores(group, k, **ends), scores(group, k, unfinished=True, **mids)
            ),
        }
        for k in keys
    }
    report["smart_turn_by_pause"] = {
        str(p): classify(
            scores(group, "smart_turn", kind="end", pause_s=p),
            scores(group, "smart_turn", kind="mid", pause_s=p),
        )
        for p in pauses
    }
    # Falling pitch and level are the textbook cues of a finished statement: the score is
    # minus the slope.
    report["prosody_auc"] = {
        cue: separation(
            [-v for v in scores(group, cue, kind="end", **at)],
            [-v for v in scores(group, cue, kind="mid", **at)],
        )
        for cue in PROSODY
    }
    return report


LABELS = {
    "smart_turn": "Smart Turn v3.2",
    "text": "text model",
    "mean": "mean(text, audio)",
    "geometric_mean": "√(text × audio)",
    "text_then_audio": "text, audio where text is 0.3–0.7",
    "logistic_loco": "logistic(text, Smart Turn), leave-one-clip-out",
    "text_prosody_loco": "logistic(text, pitch and level slopes), leave-one-clip-out",
    "prosody_loco": "logistic(pitch and level slopes), leave-one-clip-out",
}


def readme(metrics: dict[str, Any]) -> str:
    """The report: the command and the figures of ``metrics.json``."""
    timing = metrics["time_per_inference_one_thread"]
    channels: dict[str, Any] = metrics["channels"]
    lines = [
        "# Is an acoustic end-of-turn signal worth it?",
        "",
        f"Command: `{metrics['command']}` (writes `metrics.json`, every sample's scores in it).",
        f"Model: {metrics['model']['name']}, `{metrics['model']['file']}` of "
        f"`{metrics['model']['package']}`, onnxruntime {metrics['onnxruntime']}, one thread.",
        f"Word timestamps: {metrics['word_timestamps']}. Text model: {metrics['text_model']}.",
        "",
        "Complete: each clip cut at its end of speech; incomplete: the same clip cut after a "
        "word a quarter, half and three quarters of the way in; each cut followed by "
        f"{metrics['pause_s']} s of the clip's own background (the VAD's endpoint silence). "
        f"Right = P(complete) above {metrics['threshold']} for a complete sample, at or below "
        "it for an incomplete one; clearly unfinished: cut after a word no sentence ends on "
        "(an article, a preposition, …). `telephone_8k`: the clips recorded at 8 kHz, μ-law, up to "
        "16 kHz; `wideband_via_8k`: the wideband clips down to 8 kHz, μ-law and back.",
        "",
        "| channel | score | complete right | incomplete right | of which clearly unfinished "
        f"| AUC | complete right, holding {HOLD:.0%} incomplete | median P complete / incomplete |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for channel, r in channels.items():
        for key, views in r[f"pause_{PAUSE_S}s"].items():
            c, u = views["end_vs_mid"], views["end_vs_unfinished_mid"]
            lines.append(
                f"| {channel} ({r['clips']} clips) | {LABELS[key]} | {c['complete_right']} "
                f"({c['complete_accuracy']:.0%}) | {c['incomplete_right']} "
                f"({c['incomplete_accuracy']:.0%}) | {u['incomplete_right']} | {c['auc']} | "
                f"{c[f'complete_right_holding_{HOLD:.0%}_incomplete']} | "
                f"{c['complete_scores']['median']} / {c['incomplete_scores']['median']} |"
            )
    lines += [
        "",
        "Smart Turn against the length of the pause after the cut:",
        "",
        "| channel | pause | complete right | incomplete right | AUC |",
        "|---|---|---|---|---|",
    ]
    for channel, r in channels.items():
        for pause, c in r["smart_turn_by_pause"].items():
            lines.append(
                f"| {channel} | {pause} s | {c['complete_right']} | {c['incomplete_right']} "
                f"| {c['auc']} |"
            )
    lines += [
        "",
        "Prosody, AUC of minus the slope over the last 0.5 s of speech (0.5 = no signal): "
        + "; ".join(
            f"{channel}: pitch {r['prosody_auc']['pitch_slope']}, "
            f"level {r['prosody_auc']['level_slope']}"
            for channel, r in channels.items()
        )
        + ".",
        "",
        f"Time per Smart Turn decision, one thread, {timing['runs']} runs: features "
        f"{timing['features_ms']['median']} ms, ONNX {timing['onnx_ms']['median']} ms, total "
        f"median {timing['total_ms']['median']} ms (p10 {timing['total_ms']['p10']}, p90 "
        f"{timing['total_ms']['p90']}), on {timing['cpus']} cores at load average "
        f"{timing['load_average_1min']}.",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument("--words", type=Path, default=WORDS)
    parser.add_argument("--runs", type=int, default=300, help="timed inferences")
    args = parser.parse_args(argv)
    pauses = sorted({0.0, PAUSE_S, 0.5})

    model_path = smart_turn_model_path()
    model = SmartTurn(model_path)
    clips, words_source = read_clips(args.manifest, args.words)
    samples = build_samples(clips, pauses)
    text_model, text_source = load_text_model()
    for s in samples:
        s.scores["smart_turn"] = model.score(s.pcm)
        if s.kind == "clip" or s.pause_s == PAUSE_S:
            s.scores.update(prosody(s.pcm, len(s.pcm) / RATE - s.pause_s))
            if text_model is not None:
                s.scores["text"] = text_score(text_model, s.text)
    results: dict[str, Any] = {}
    for channel in sorted({s.channel for s in samples}):
        group = [s for s in samples if s.channel == channel]
        main_pause = [s for s in group if s.kind == "clip" or s.pause_s == PAUSE_S]
        leave_one_clip_out(main_pause, PROSODY, "prosody_loco")
        if text_model is not None:
            combine(main_pause)
            leave_one_clip_out(main_pause, ["text", "smart_turn"], "logistic_loco")
            leave_one_clip_out(main_pause, ["text", *PROSODY], "text_prosody_loco")
        results[channel] = channel_report(group, pauses)
    timing = time_inference(model, max(samples, key=lambda s: len(s.pcm)).pcm, args.runs)

    metrics = {
        "command": f"python latency_reports/end-of-turn-acoustic/acoustic_turn.py --out {args.out}",
        "model": {
            "name": "Smart Turn v3.2 (CPU ONNX)",
            "package": PIPECAT,
            "file": MODEL_FILE,
            "bytes": model_path.stat().st_size,
        },
        "onnxruntime": ort.__version__,
        "threshold": THRESHOLD,
        "pause_s": PAUSE_S,
        "pauses_s": pauses,
        "word_timestamps": words_source,
        "text_model": text_source,
        "text_threshold": None if text_model is None else text_model.threshold,
        "time_per_inference_one_thread": timing,
        "channels": results,
        "samples": [
            {
                "clip": s.clip,
                "channel": s.channel,
                "kind": s.kind,
                "pause_s": s.pause_s,
                "words": s.words,
                "of": s.of,
                "unfinished": s.unfinished,
                "cut_s": s.cut_s,
                "text": s.text,
                "scores": {k: None if v is None else round(v, 4) for k, v in s.scores.items()},
            }
            for s in samples
        ],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_report(args.out, {"metrics.json": metrics})
    (args.out / "README.md").write_text(readme(metrics), encoding="utf-8")
    for channel, r in results.items():
        for key, views in r[f"pause_{PAUSE_S}s"].items():
            c = views["end_vs_mid"]
            print(
                f"{channel:16} {key:16} complete {c['complete_right']:>6}  "
                f"incomplete {c['incomplete_right']:>6}  auc {c['auc']}"
            )
        for pause, c in r["smart_turn_by_pause"].items():
            print(
                f"{channel:16} smart_turn pause {pause:>4} s: complete {c['complete_right']:>6}  "
                f"incomplete {c['incomplete_right']:>6}  auc {c['auc']}"
            )
        print(f"{channel:16} prosody auc {r['prosody_auc']}")
    print("time per inference, one thread:", json.dumps(timing))


if __name__ == "__main__":
    main()
