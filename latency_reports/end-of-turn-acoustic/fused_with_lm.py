"""Does an acoustic end-of-turn signal lower false cut-offs beside the language model's P?

The cases are a ``cadence bench-turns … --no-live --no-interruptions`` run's offline cases
(``turn_taking.json``: every mid-turn pause of the callers, with its silence, where it begins
in the engine's audio and the language model's P of whisper's words before it) and its ends
(each complete clip's whole-turn P). For each audio path (16 kHz in process; the 8 kHz μ-law
phone line, ``turn_taking_offline.engine_audio``) every mid-turn pause (label 0) and every
clip's end of speech (label 1: ``pause_points.engine_pauses``' second value on the same engine
audio) is heard as the engine hears it at a decision: the audio up to the pause, then 0.2 s of
what follows (the endpoint silence the engine waits anyway; where the silence is shorter, or
the clip ends sooner, the rest is the clip's own background, ``paused_clips.noise_bed``, so
that no resumed speech is heard). Smart Turn v3.2 scores the last 8 s of it (P_acoustic; the
runner of ``acoustic_turn.py``), and the pitch and level slopes over the last 0.5 s of speech
are taken. Scores, each through the runtime's continuous wait rule:

* ``lm``: the language model's P as the bench computed it;
* ``lm_refit``: a logistic fit on logit(P_lm) alone, leave-one-source-clip-out — the control:
  what re-scaling the LM's log-odds alone does, so that the fusion is credited only with what
  the audio adds;
* ``acoustic``: Smart Turn v3.2's P;
* ``fused``: a logistic fit on logit(P_lm) and logit(P_acoustic), leave-one-source-clip-out
  (a paused clip's source is ``source_id``; a complete clip is its own): no clip's own label,
  nor any clip cut from the same recording, is fit on;
* ``fused_lm_units``: the same fit in the LM's units — logit(P_lm) + (b/a)·(logit(P_acoustic)
  − its training mean), a and b the fit's weights: the LM's own scale and level kept (the fit
  shrinks the log-odds and shifts them to this set's share of ends, and S and the confidence
  sweep alone cannot undo that), so that the audio's term is all that differs from ``lm``;
* ``fused_prosody``: the same as ``fused`` with the pitch and level slopes added.

Figures (``tradeoff.field_figures`` of ``continuous_curve``, and ``fixed_curve`` for
reference) for ``EndOfTurnConfig(max_wait_ms=2500, pause_scale_ms=S)``, S in 200, 300, 500,
800 ms; the AUC of each score (mid-turn pauses against ends); and, for ``fused`` against
``lm`` and ``lm_refit``, and ``fused_lm_units`` against ``lm``, a paired bootstrap over source
clips of each figure's difference. A difference counts as a finding only when it is more
than two cases (cut-off rates) and its 95 % bootstrap interval excludes zero — a rule fixed
before any figure was seen (``fused_lm_units`` was added after the first run, which showed
that the fit's shrinking of the log-odds, not the audio, moved ``fused``'s figures).

    python latency_reports/end-of-turn-acoustic/fused_with_lm.py \\
        --cases latency_reports/turn-taking-field/read-speech/turn_taking.json \\
        --manifest bench-clips/paused/manifest.jsonl \\
        --out latency_reports/end-of-turn-acoustic/fused_with_lm.json

Run as a script (its folder is then on ``sys.path``: ``acoustic_turn`` is imported from it).
Rejected-work tooling like ``acoustic_turn.py``: not part of any package or the test suite.
Needs ``pip install --no-deps pipecat-ai==1.14.0`` (the ONNX file; nothing of it imported).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from acoustic_turn import (
    MODEL_FILE,
    PIPECAT,
    PROSODY,
    Float,
    SmartTurn,
    fit_logistic,
    logit,
    prosody,
    smart_turn_model_path,
)

from cadence.core.stats import auc, percentile
from cadence.pipeline.config import EndOfTurnConfig
from cadence.pipeline.end_of_turn import end_of_turn_wait_ms
from cadence.tooling.bench.pause_points import engine_pauses
from cadence.tooling.bench.paused_clips import noise_bed
from cadence.tooling.bench.tradeoff import (
    CONFIDENCES,
    Curve,
    CurvePoint,
    PausedCase,
    continuous_curve,
    field_figures,
    fixed_curve,
)
from cadence.tooling.bench.turn_taking import SPEECH_RATE, TurnClip, read_turn_manifest
from cadence.tooling.bench.turn_taking_offline import engine_audio
from cadence.voice.audio import PCM16

PATHS = (("16 kHz", False), ("8 kHz phone line", True))
"""Each audio path: its name in ``turn_taking.json`` and whether it is the phone line."""
MODEL = "lm model"
TAIL_S = 0.2
"""What the engine hears after the pause begins before any decision: its endpoint silence."""
SCALES_MS = (200, 300, 500, 800)
MAX_WAIT_MS = 2500
SCORES = ("lm", "lm_refit", "acoustic", "fused", "fused_lm_units", "fused_prosody")
LABELS = {
    "lm": "LM alone",
    "lm_refit": "LM refit (control)",
    "acoustic": "Smart Turn v3.2 alone",
    "fused": "fused LM + Smart Turn",
    "fused_lm_units": "fused, in the LM's log-odds units",
    "fused_prosody": "fused LM + Smart Turn + slopes",
}
COMPARED = (("fused", "lm"), ("fused", "lm_refit"), ("fused_lm_units", "lm"))
"""(score, baseline): compared by bootstrap."""
FIGURES = (
    "cut_offs_at_300_ms",
    "cut_offs_at_600_ms",
    "wait_at_5_percent_ms",
    "wait_at_10_percent_ms",
)
VERDICT_FIGURES = ("cut_offs_at_300_ms", "wait_at_5_percent_ms", "wait_at_10_percent_ms")
MIN_CASES = 3
"""A cut-off rate must differ by more than two cases to count (and its interval exclude 0)."""


@dataclass
class Sample:
    """One decision point: a mid-turn pause (``label`` 0) or a turn's end (1)."""

    clip_id: str
    source: str
    label: int
    at_s: float
    """Where the pause (or the end of speech) begins in the engine's audio."""
    p_lm: float
    case: PausedCase | None
    """The bench's case (mid-turn pauses only)."""
    heard_s: float = 0.0
    """Of the 0.2 s after ``at_s``: how much was the clip's own audio (the rest background)."""
    scores: dict[str, float] = field(default_factory=dict)
    slopes: dict[str, float | None] = field(default_factory=dict)


def load_average() -> str:
    return Path("/proc/loadavg").read_text(encoding="utf-8").strip()


# --- the decision audio ---------------------------------------------------------------------


def decision_audio(audio: PCM16, at_s: float, follows_s: float) -> tuple[PCM16, float]:
    """``audio`` up to ``at_s`` and then ``TAIL_S`` of what follows — of it at most
    ``follows_s`` (the silence before speech resumes, or what is left of the clip), the rest
    the clip's own background — and how much of the clip's own audio followed."""
    start = round(at_s * SPEECH_RATE)
    heard = max(0, min(round(min(TAIL_S, follows_s) * SPEECH_RATE), len(audio) - start))
    missing = round(TAIL_S * SPEECH_RATE) - heard
    head = audio[: start + heard]
    if missing > 0:
        head = np.concatenate([head, noise_bed(audio, SPEECH_RATE, missing)])
    return head, heard / SPEECH_RATE


def path_samples(
    block: dict[str, Any], clips: dict[str, TurnClip], telephone: bool, model: SmartTurn
) -> tuple[list[Sample], list[str], list[float]]:
    """Every mid-turn pause and end of one audio path, scored by Smart Turn and the slopes;
    the clips without speech (left out), and each Smart Turn run's time (ms)."""
    audios: dict[str, PCM16] = {}

    def audio_of(clip_id: str) -> PCM16:
        if clip_id not in audios:
            audios[clip_id] = engine_audio(clips[clip_id], telephone)
        return audios[clip_id]

    samples: list[Sample] = []
    for raw in block["cases"]:
        case = PausedCase(**raw)
        if case.at_s is None:
            raise SystemExit(f"case {case.clip_id}: no at_s (rerun cadence bench-turns)")
        clip = clips[case.clip_id]
        samples.append(Sample(case.clip_id, clip.source_id, 0, case.at_s, case.p, case))
    left_out = []
    for heard in block["heard_complete"]:
        clip = clips[heard["clip_id"]]
        _, end_ms = engine_pauses(audio_of(clip.id), SPEECH_RATE)
        if end_ms is None or heard["p"] is None:
            left_out.append(clip.id)
            continue
        samples.append(Sample(clip.id, clip.source_id, 1, end_ms / 1000.0, heard["p"], None))
    times_ms = []
    for s in samples:
        audio = audio_of(s.clip_id)
        follows_s = (
            s.case.silence_ms / 1000.0 if s.case is not None else len(audio) / SPEECH_RATE - s.at_s
        )
        pcm, s.heard_s = decision_audio(audio, s.at_s, follows_s)
        start = time.perf_counter()
        s.scores["acoustic"] = model.score(pcm)
        times_ms.append((time.perf_counter() - start) * 1000)
        s.scores["lm"] = s.p_lm
        s.slopes = prosody(pcm, s.at_s)
    return samples, left_out, times_ms


# --- fits -----------------------------------------------------------------------------------


def sigmoid(z: Float) -> Float:
    out: Float = 1.0 / (1.0 + np.exp(-z))
    return out


def leave_one_source_out(
    samples: Sequence[Sample],
    inputs: Callable[[Sample], list[float]],
    out: str,
    lm_units: str | None = None,
) -> None:
    """``out``: a logistic fit on ``inputs`` (standardised on the training sources), each
    source clip's samples scored by the fit on all the other sources'; ``lm_units``: the same
    fit in the units of its first input, logit(P_lm): that input as it comes, plus the other
    inputs' terms (centred on the training sources' mean) divided by its weight."""
    x_all = np.array([inputs(s) for s in samples], np.float64)
    y_all = np.array([float(s.label) for s in samples])
    sources = np.array([s.source for s in samples])
    for source in sorted(set(sources)):
        held = sources == source
        train = ~held
        mean, std = x_all[train].mean(axis=0), x_all[train].std(axis=0) + 1e-9
        x = (x_all - mean) / std
        w = fit_logistic(x[train], y_all[train])
        z = x[held] @ w[:-1] + w[-1]
        chosen = [s for s, h in zip(samples, held, strict=True) if h]
        for s, value in zip(chosen, sigmoid(z), strict=True):
            s.scores[out] = float(value)
        if lm_units is not None:
            # logit(P_lm) + Σ (w_i/s_i)/(w_0/s_0)·(x_i − m_i): the LM's log-odds as they come,
            # moved by the other inputs' terms in its units, centred on the training mean
            if w[0] <= 0:
                raise SystemExit(f"source {source}: the fit's weight on the LM is {w[0]}")
            ratio = (w[1:-1] / std[1:]) / (w[0] / std[0])
            shift = (x_all[held][:, 1:] - mean[1:]) @ ratio
            for s, value in zip(chosen, sigmoid(x_all[held][:, 0] + shift), strict=True):
                s.scores[lm_units] = float(value)


def slope(s: Sample, cue: str) -> float:
    """A slope as a fit's input (an unvoiced end, with no slope, as flat)."""
    return s.slopes.get(cue) or 0.0


def fit_all(samples: Sequence[Sample]) -> None:
    leave_one_source_out(samples, lambda s: [logit(s.p_lm)], "lm_refit")
    leave_one_source_out(
        samples,
        lambda s: [logit(s.p_lm), logit(s.scores["acoustic"])],
        "fused",
        "fused_lm_units",
    )
    leave_one_source_out(
        samples,
        lambda s: [logit(s.p_lm), logit(s.scores["acoustic"]), *(slope(s, c) for c in PROSODY)],
        "fused_prosody",
    )


# --- figures --------------------------------------------------------------------------------


def options(scale_ms: float) -> EndOfTurnConfig:
    return EndOfTurnConfig(max_wait_ms=MAX_WAIT_MS, pause_scale_ms=scale_ms)


class WaitTable:
    """The continuous rule's wait (``end_of_turn_wait_ms`` itself) for every confidence of
    the sweep and every sample of one score, so that resamples of the samples read their
    curves by indexing alone; with every sample once, the figures of ``continuous_curve``."""

    def __init__(
        self, cases: Sequence[PausedCase], ends: Sequence[float], rule: EndOfTurnConfig
    ) -> None:
        rules = [rule.model_copy(update={"confidence": float(c)}) for c in CONFIDENCES]
        self.cases = np.array([[end_of_turn_wait_ms(c.p, r) for c in cases] for r in rules])
        self.ends = np.array([[end_of_turn_wait_ms(p, r) for p in ends] for r in rules])
        self.silence = np.array([c.silence_ms for c in cases])

    def figures(self, case_index: Sequence[int], end_index: Sequence[int]) -> dict[str, Any]:
        hits = (self.cases[:, case_index] < self.silence[case_index]).sum(axis=1)
        paid = self.ends[:, end_index]
        medians = np.percentile(paid, 50, axis=1)
        points = [
            CurvePoint(
                setting=float(c),
                talk_over_rate=int(h) / len(case_index),
                talk_overs=int(h),
                median_wait_ms=float(m),
                mean_wait_ms=None,
                p90_wait_ms=None,
            )
            for c, h, m in zip(CONFIDENCES, hits, medians, strict=True)
        ]
        return field_figures(Curve("continuous", points, len(case_index), len(end_index), None))


def split(samples: Sequence[Sample], key: str) -> tuple[list[PausedCase], list[float]]:
    """The cases with ``key``'s score as their P, and the ends' scores."""
    cases = [replace(s.case, p=s.scores[key]) for s in samples if s.case is not None]
    ends = [s.scores[key] for s in samples if s.label == 1]
    return cases, ends


def with_counts(figures: dict[str, Any], n_cases: int) -> dict[str, Any]:
    out = dict(figures)
    for budget in ("300", "600"):
        rate = figures[f"cut_offs_at_{budget}_ms"]
        out[f"cut_off_cases_at_{budget}_ms"] = None if rate is None else round(rate * n_cases)
    return out


def separation(samples: Sequence[Sample], values: Sequence[float]) -> float:
    return round(auc(values, [s.label for s in samples]), 4)


def interval(values: Sequence[float]) -> list[float] | None:
    if not values:
        return None
    return [round(percentile(values, 2.5), 4), round(percentile(values, 97.5), 4)]


def bootstrap(
    samples: Sequence[Sample], tables: dict[str, dict[float, WaitTable]], runs: int, seed: int
) -> dict[str, Any]:
    """Paired resamples of the source clips (with replacement): each figure's and the AUC's
    difference, score minus baseline for each pair of ``COMPARED``, at every scale."""
    rng = np.random.default_rng(seed)
    cases = [s for s in samples if s.case is not None]
    ends = [s for s in samples if s.label == 1]
    sources = sorted({s.source for s in samples})
    case_of = {src: [i for i, s in enumerate(cases) if s.source == src] for src in sources}
    end_of = {src: [i for i, s in enumerate(ends) if s.source == src] for src in sources}
    all_of = {src: [i for i, s in enumerate(samples) if s.source == src] for src in sources}
    labels = np.array([s.label for s in samples])
    score = {k: np.array([s.scores[k] for s in samples]) for pair in COMPARED for k in pair}
    diffs: dict[str, dict[str, dict[str, list[float]]]] = {
        pair_name(pair): {str(scale): {f: [] for f in FIGURES} for scale in SCALES_MS}
        for pair in COMPARED
    }
    auc_diffs: dict[str, list[float]] = {pair_name(pair): [] for pair in COMPARED}
    undefined = 0
    for _ in range(runs):
        drawn = rng.choice(len(sources), len(sources))
        case_index = [i for d in drawn for i in case_of[sources[d]]]
        end_index = [i for d in drawn for i in end_of[sources[d]]]
        if not case_index or not end_index:
            undefined += 1
            continue
        sample_index = [i for d in drawn for i in all_of[sources[d]]]
        y = labels[sample_index]
        for key, base in COMPARED:
            name = pair_name((key, base))
            auc_diffs[name].append(
                auc(score[key][sample_index], y) - auc(score[base][sample_index], y)
            )
            for scale in SCALES_MS:
                mine = tables[key][scale].figures(case_index, end_index)
                other = tables[base][scale].figures(case_index, end_index)
                for f in FIGURES:
                    if mine[f] is not None and other[f] is not None:
                        diffs[name][str(scale)][f].append(mine[f] - other[f])
    return {
        "runs": runs,
        "seed": seed,
        "resamples_without_cases_or_ends": undefined,
        "auc_difference_ci95": {b: interval(v) for b, v in auc_diffs.items()},
        "figure_difference_ci95": {
            base: {
                scale: {f: {"ci95": interval(v), "defined_in": len(v)} for f, v in by_scale.items()}
                for scale, by_scale in by_base.items()
            }
            for base, by_base in diffs.items()
        },
    }


def pair_name(pair: tuple[str, str]) -> str:
    return f"{pair[0]} - {pair[1]}"


def finding(
    figure: str, fused: float | None, other: float | None, ci: list[float] | None, n: int
) -> str:
    """``lower``/``higher`` where the difference is a finding (more than two cases for a rate,
    and a 95 % interval that excludes zero), else ``no finding``."""
    if fused is None or other is None or ci is None:
        return "undefined"
    diff = fused - other
    if figure.startswith("cut_offs") and abs(round(diff * n)) < MIN_CASES:
        return "no finding"
    if ci[1] < 0:
        return "lower"
    if ci[0] > 0:
        return "higher"
    return "no finding"


def path_report(samples: list[Sample], runs: int, seed: int) -> dict[str, Any]:
    cases = [s for s in samples if s.case is not None]
    n = len(cases)
    lm_cases, lm_ends = split(samples, "lm")
    report: dict[str, Any] = {
        "mid_turn_pauses": n,
        "ends": len(samples) - n,
        "source_clips": len({s.source for s in samples}),
        "background_padded": {
            "mid_turn_pauses": sum(s.heard_s < TAIL_S - 1e-9 for s in cases),
            "ends": sum(s.heard_s < TAIL_S - 1e-9 for s in samples if s.label == 1),
        },
        "fixed": field_figures(fixed_curve(lm_cases, lm_ends)),
        "auc": {k: separation(samples, [s.scores[k] for s in samples]) for k in SCORES},
        "slope_auc": {
            # Falling pitch and level are the textbook cues of a finish: the score is −slope.
            cue: separation(samples, [-slope(s, cue) for s in samples])
            for cue in PROSODY
        },
    }
    tables: dict[str, dict[float, WaitTable]] = {}
    figures: dict[str, dict[str, Any]] = {}
    for key in SCORES:
        key_cases, key_ends = split(samples, key)
        tables[key] = {}
        figures[key] = {}
        for scale in SCALES_MS:
            official = field_figures(continuous_curve(key_cases, key_ends, options(scale)))
            table = WaitTable(key_cases, key_ends, options(scale))
            fast = table.figures(list(range(n)), list(range(len(key_ends))))
            assert all(
                (a is None and b is None)
                or (a is not None and b is not None and math.isclose(a, b, abs_tol=1e-9))
                for a, b in ((official[f], fast[f]) for f in FIGURES)
            ), (key, scale, official, fast)
            tables[key][scale] = table
            figures[key][str(scale)] = with_counts(official, n)
    report["figures"] = figures
    boot = bootstrap(samples, tables, runs, seed)
    report["bootstrap"] = boot
    report["verdict"] = {
        pair_name((key, base)): {
            str(scale): {
                f: finding(
                    f,
                    figures[key][str(scale)][f],
                    figures[base][str(scale)][f],
                    boot["figure_difference_ci95"][pair_name((key, base))][str(scale)][f]["ci95"],
                    n,
                )
                for f in FIGURES
            }
            for scale in SCALES_MS
        }
        for key, base in COMPARED
    }
    return report


# --- the report -----------------------------------------------------------------------------


def fmt_rate(rate: float | None, cases: int | None, n: int) -> str:
    if rate is None:
        return "—"
    return f"{rate:.1%} ({round(rate * n) if cases is None else cases}/{n})"


def fmt_ms(ms: float | None) -> str:
    return "—" if ms is None else f"{ms:.0f}"


def fmt_diff(figure: str, diff: float, ci: list[float] | None) -> str:
    if figure.startswith("cut_offs"):
        span = "" if ci is None else f" [{ci[0]:+.1%}, {ci[1]:+.1%}]"
        return f"{diff:+.1%}{span}"
    span = "" if ci is None else f" [{ci[0]:+.0f}, {ci[1]:+.0f}]"
    return f"{diff:+.0f} ms{span}"


def summary(paths: dict[str, Any]) -> list[str]:
    """The verdict, from the findings rule alone."""
    lines = []
    for name, r in paths.items():
        for key, base in COMPARED:
            found = [
                f"{f} at S = {scale} ms ({v})"
                for scale, by_figure in r["verdict"][pair_name((key, base))].items()
                for f, v in by_figure.items()
                if f in VERDICT_FIGURES and v in ("lower", "higher")
            ]
            lines.append(
                f"- {name}, {LABELS[key]} against {LABELS[base]}: "
                + ("; ".join(found) if found else "no finding at any S")
                + "."
            )
    return lines


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Smart Turn v3.2 fused with the language model's P: false cut-offs and waits",
        "",
        f"Command: `{result['command']}`",
        "",
        f"Cases: `{result['cases']}`; clips: `{result['manifest']}`. Smart Turn v3.2 "
        f"(`{result['model']['file']}` of `{result['model']['package']}`, pipecat-ai "
        f"{result['pipecat_ai']} installed, nothing of it imported), onnxruntime "
        f"{result['onnxruntime']}, one thread. Load average at start `{result['load_start']}`, "
        f"at end `{result['load_end']}`.",
        "",
        "Each mid-turn pause (label 0) and each complete clip's end of speech (label 1) heard "
        f"as the engine hears it up to the pause, then {TAIL_S} s of what follows (background "
        "where the silence is shorter or the clip ends); Smart Turn on the last 8 s. Wait rule: "
        f"`EndOfTurnConfig(max_wait_ms={MAX_WAIT_MS}, pause_scale_ms=S)`, min wait 200 ms, "
        "confidence swept; figures as `tradeoff.field_figures` reads the curve (least cut-off "
        "rate with a median wait within 300/600 ms; least median wait with cut-offs within "
        "5 %/10 %). Fits: logistic, leave-one-source-clip-out. `LM refit` is the control: "
        "the LM's log-odds re-scaled by the same kind of fit, without the audio. `fused, in "
        "the LM's log-odds units`: logit(P_lm) + (b/a)·(logit(P_acoustic) − its training "
        "mean), a and b the fused fit's weights, so that scale and level are the LM's and only "
        "the audio's term differs (added after the first run showed the fit's shrinking of the "
        "log-odds moving the figures).",
        "",
    ]
    for name, r in result["paths"].items():
        n = r["mid_turn_pauses"]
        fixed = r["fixed"]
        lines += [
            f"## {name}",
            "",
            f"{n} mid-turn pauses, {r['ends']} ends, {r['source_clips']} source clips; "
            f"background after the pause: {r['background_padded']['mid_turn_pauses']} pauses "
            f"(silence under {TAIL_S} s), {r['background_padded']['ends']} ends. Fixed wait "
            f"(reference): cut-offs at 300 ms {fmt_rate(fixed['cut_offs_at_300_ms'], None, n)}"
            f", at 600 ms {fmt_rate(fixed['cut_offs_at_600_ms'], None, n)}; wait at 5 % "
            f"{fmt_ms(fixed['wait_at_5_percent_ms'])} ms, at 10 % "
            f"{fmt_ms(fixed['wait_at_10_percent_ms'])} ms. Slope AUCs (−slope): "
            + ", ".join(f"{c} {v}" for c, v in r["slope_auc"].items())
            + ".",
            "",
            "| score | AUC | S (ms) | cut-offs, wait ≤ 300 ms | cut-offs, wait ≤ 600 ms "
            "| wait at 5 % (ms) | wait at 10 % (ms) |",
            "|---|---|---|---|---|---|---|",
        ]
        for key in SCORES:
            for scale in SCALES_MS:
                f = r["figures"][key][str(scale)]
                lines.append(
                    f"| {LABELS[key]} | {r['auc'][key]} | {scale} | "
                    f"{fmt_rate(f['cut_offs_at_300_ms'], f['cut_off_cases_at_300_ms'], n)} | "
                    f"{fmt_rate(f['cut_offs_at_600_ms'], f['cut_off_cases_at_600_ms'], n)} | "
                    f"{fmt_ms(f['wait_at_5_percent_ms'])} | {fmt_ms(f['wait_at_10_percent_ms'])} |"
                )
        boot = r["bootstrap"]
        lines += [
            "",
            f"Each fusion minus its baseline, with the 95 % interval of {boot['runs']} paired "
            "resamples of the source clips; a finding needs more than two cases (rates) and an "
            "interval that excludes zero. AUC difference intervals: "
            + ", ".join(f"{p} {ci}" for p, ci in boot["auc_difference_ci95"].items())
            + ".",
            "",
            "| score | baseline | S (ms) | figure | baseline's | score's "
            "| score − baseline [95 %] | finding |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for key, base in COMPARED:
            pair = pair_name((key, base))
            for scale in SCALES_MS:
                for fig in VERDICT_FIGURES:
                    other = r["figures"][base][str(scale)][fig]
                    fused = r["figures"][key][str(scale)][fig]
                    ci = boot["figure_difference_ci95"][pair][str(scale)][fig]["ci95"]
                    shown = fmt_rate if fig.startswith("cut_offs") else None
                    if shown is None:
                        values = [fmt_ms(other), fmt_ms(fused)]
                    else:
                        count = "cut_off_cases_at_300_ms"
                        values = [
                            fmt_rate(other, r["figures"][base][str(scale)][count], n),
                            fmt_rate(fused, r["figures"][key][str(scale)][count], n),
                        ]
                    diff = (
                        "—" if other is None or fused is None else fmt_diff(fig, fused - other, ci)
                    )
                    lines.append(
                        f"| {LABELS[key]} | {LABELS[base]} | {scale} | {fig} | {values[0]} | "
                        f"{values[1]} | {diff} | {r['verdict'][pair][str(scale)][fig]} |"
                    )
        lines.append("")
    tests = len(COMPARED) * len(SCALES_MS) * len(VERDICT_FIGURES)
    lines += [
        "## Verdict (by the rule fixed beforehand)",
        "",
        *summary(result["paths"]),
        "",
        f"Each path makes {tests} comparisons at 95 % (scores × S × figures, not independent): "
        "a lone finding among them, at one S, is about what chance alone gives.",
        "",
    ]
    if result.get("note"):
        lines += [result["note"], ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--cases", type=Path, required=True, help="a turn_taking.json")
    parser.add_argument("--manifest", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="the JSON (the .md beside it)")
    parser.add_argument("--bootstrap", type=int, default=1000, help="paired resamples")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--note", default="", help="a line added to the report")
    args = parser.parse_args(argv)
    load_start = load_average()
    command = shlex.join(["python", "latency_reports/end-of-turn-acoustic/fused_with_lm.py"])
    command += " " + shlex.join(sys.argv[1:] if argv is None else list(argv))

    report = json.loads(args.cases.read_text(encoding="utf-8"))
    clips = {c.id: c for c in read_turn_manifest(args.manifest)}
    model_path = smart_turn_model_path()
    model = SmartTurn(model_path)
    paths: dict[str, Any] = {}
    records: dict[str, Any] = {}
    for name, telephone in PATHS:
        block = report["tradeoff"][f"{name}, {MODEL}"]
        samples, left_out, times_ms = path_samples(block, clips, telephone, model)
        fit_all(samples)
        paths[name] = path_report(samples, args.bootstrap, args.seed)
        paths[name]["ends_left_out_no_speech"] = left_out
        paths[name]["smart_turn_ms"] = {
            "median": round(percentile(times_ms, 50), 2),
            "p90": round(percentile(times_ms, 90), 2),
        }
        records[name] = [
            {
                **{k: v for k, v in asdict(s).items() if k not in ("case", "scores", "slopes")},
                "silence_ms": None if s.case is None else s.case.silence_ms,
                "inserted": None if s.case is None else s.case.inserted,
                "scores": {k: round(v, 5) for k, v in s.scores.items()},
                "slopes": {k: None if v is None else round(v, 3) for k, v in s.slopes.items()},
            }
            for s in samples
        ]
        print(name, json.dumps({"auc": paths[name]["auc"]}))
        for key in SCORES:
            for scale in SCALES_MS:
                print(f"  {key:14} S={scale:4} {paths[name]['figures'][key][str(scale)]}")
    result = {
        "command": command,
        "cases": str(args.cases),
        "manifest": str(args.manifest),
        "model": {"package": PIPECAT, "file": MODEL_FILE, "bytes": model_path.stat().st_size},
        "pipecat_ai": importlib.metadata.version("pipecat-ai"),
        "onnxruntime": ort.__version__,
        "tail_s": TAIL_S,
        "scales_ms": list(SCALES_MS),
        "max_wait_ms": MAX_WAIT_MS,
        "note": args.note,
        "paths": paths,
        "samples": records,
        "load_start": load_start,
        "load_end": load_average(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    args.out.with_suffix(".md").write_text(markdown(result), encoding="utf-8")
    print("\n".join(summary(paths)))


if __name__ == "__main__":
    main()
