"""``cadence bench-turns``: turn-taking on real speech — talk-overs, false interruptions, the
voice-to-voice of complete turns, and the trade-off between them.

The clips are ``cadence make-paused-clips``'s (``tooling/bench/paused_clips.py``): each
utterance complete, and the same with a silence of 0.3–1.5 s inserted mid-sentence. Live,
each is played in real time as one turn through the bench's own machinery (``run_bench``,
``run_turn``, ``TwilioTurnRunner``) at the configuration's settings; the traces say what
became of every turn (``pipeline/tracing/outcomes.py``). Offline, the text the engine would
see at each pause (whisper's transcript of the audio before it) and at the end of each
complete clip is scored by the text end-of-turn model, which gives the trade-off curve of
``tooling/bench/tradeoff.py`` for any setting without a rerun, and the model's accuracy on
utterances from outside its training domains.

Figures (``turn_taking.json``, ``turn_taking.md``, ``tradeoff.png``; the budget report of the
same traces beside them):

* per transport, **complete clips**: voice-to-voice (true end of speech → first reply sound
  heard) p50/p90 of the turns answered after the end, and every turn's outcome counted;
* per transport, **paused clips**: by pause length, the share of clips talked over (a reply
  heard before the true end of speech), of them how many were heard in or after the inserted
  pause, and the early commits withdrawn unheard; the target bucket (0.5–1 s) pooled;
* **false interruptions** (``tooling/bench/interruptions.py``): per sound played while a reply
  is heard, whether the reply was cut or resumed;
* the **trade-off curve** (fixed wait, adaptive wait) and the smallest wait under 5 %
  talk-overs; the **text model's accuracy** on the clips' reference transcripts (complete)
  and their prefixes at every mid-sentence word boundary (incomplete), and on whisper's
  transcripts of the complete clips and of the paused prefixes.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from cadence.llm.pretrained import PretrainedModelError
from cadence.pipeline.config import CadenceConfig, EndOfTurnConfig
from cadence.pipeline.model_loading import load_stt, load_turn_end_model
from cadence.pipeline.tracing import (
    ANSWERED_IN_TIME,
    AnchorEvent,
    TurnOutcome,
    TurnTrace,
    turn_outcome,
)
from cadence.pipeline.tracing.outcomes import heard_at_ms
from cadence.tooling.bench.interruptions import AFTER_HEARD_MS
from cadence.tooling.bench.manifest import ManifestClip, read_manifest
from cadence.tooling.bench.paused_clips import PAUSES_S, UNFINISHED, ends_sentence, normalised
from cadence.tooling.bench.tradeoff import (
    TARGET_BUCKET_S,
    TARGET_RATE,
    PausedCase,
    adaptive_curve,
    at_setting,
    fixed_curve,
    in_bucket,
)
from cadence.voice.audio import PCM16, resample, ulaw_decode, ulaw_encode
from cadence.voice.audio.speech_bounds import speech_bounds_ms
from cadence.voice.audio.wavfile import read_audio
from cadence.voice.turn import TextEndOfTurnModel, TextEndOfTurnModelError

SCHEMA = "cadence.turn_taking/1"
JSON_FILE = "turn_taking.json"
MARKDOWN_FILE = "turn_taking.md"
PLOT_FILE = "tradeoff.png"
SPEECH_RATE = 16000
TELEPHONE_RATE = 8000

Kind = Literal["complete", "paused"]


@dataclass(frozen=True)
class TurnClip:
    """One line of a paused-clips manifest."""

    clip: ManifestClip
    source_id: str
    kind: Kind
    pause_at_s: float | None = None
    pause_s: float | None = None
    prefix_text: str | None = None
    silence_s: float | None = None

    @property
    def id(self) -> str:
        return self.clip.id


def read_turn_manifest(path: Path) -> list[TurnClip]:
    """The clips of a ``make-paused-clips`` manifest; a plain bench manifest reads as complete
    clips only."""
    clips = read_manifest(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    result = []
    for clip, row in zip(clips, rows, strict=True):
        kind = row.get("kind", "complete")
        if kind not in ("complete", "paused"):
            raise ValueError(f"{path}: clip {clip.id!r} has kind {kind!r}")
        paused = kind == "paused"
        if paused and (row.get("pause_at_s") is None or row.get("pause_s") is None):
            raise ValueError(f"{path}: paused clip {clip.id!r} lacks pause_at_s or pause_s")
        result.append(
            TurnClip(
                clip,
                str(row.get("source_id", clip.id)),
                kind,
                float(row["pause_at_s"]) if paused else None,
                float(row["pause_s"]) if paused else None,
                row.get("prefix_text"),
                float(row["silence_s"]) if row.get("silence_s") is not None else None,
            )
        )
    return result


# ---------------------------------------------------------------------------------- live


def transport_of(variant: str) -> str:
    """The bench names the in-process run ``full`` and every other by its transport."""
    return "direct" if variant == "full" else variant


def played_audio(clip: ManifestClip, transport: str) -> tuple[PCM16, int]:
    """The audio a transport plays of ``clip``, at its rate (as the bench's runners read it)."""
    if transport == "direct":
        return read_audio(clip.path, SPEECH_RATE), SPEECH_RATE
    return read_audio(clip.telephone_path or clip.path, TELEPHONE_RATE), TELEPHONE_RATE


def clip_outcome(turns: Sequence[TurnTrace]) -> str:
    """What became of a clip, played as one turn: ``failed``, ``talked_over``, ``answered``
    (a reply heard after the end of speech), else ``unanswered`` — the first that applies to
    any of its turns."""
    outcomes = {turn_outcome(t) for t in turns}
    if TurnOutcome.FAILED in outcomes:
        return "failed"
    if TurnOutcome.TALKED_OVER in outcomes:
        return "talked_over"
    if outcomes & ANSWERED_IN_TIME:
        return "answered"
    return "unanswered"


def _voice_to_voice(turns: Iterable[TurnTrace]) -> list[float]:
    values = []
    for turn in turns:
        heard, end = heard_at_ms(turn), turn.events.get(AnchorEvent.USER_SPEECH_END)
        if turn_outcome(turn) in ANSWERED_IN_TIME and heard is not None and end is not None:
            values.append(heard - end)
    return values


def latency_stats(values: Sequence[float]) -> dict[str, float | int | None]:
    """``count``, ``p50``, ``p90`` (linear interpolation), ``max``; nulls without values."""
    if not values:
        return {"count": 0, "p50": None, "p90": None, "max": None}
    array = np.asarray(values, np.float64)
    return {
        "count": len(values),
        "p50": float(np.percentile(array, 50)),
        "p90": float(np.percentile(array, 90)),
        "max": float(array.max()),
    }


@dataclass
class PausedClipResult:
    clip_id: str
    source_id: str
    pause_s: float
    outcome: str
    heard_at_s: float | None
    """When a talked-over reply was first heard, in seconds of the clip (``None`` if none)."""
    into_pause: bool
    """Talked over at or after the inserted pause (not at a pause of the clip's own)."""
    withdrawn: int
    """Early commits taken back unheard."""


def _heard_in_clip_s(turns: Sequence[TurnTrace], speech_end_in_clip_ms: float) -> float | None:
    """When the first talked-over reply was heard, in seconds from the clip's start."""
    for turn in turns:
        if turn_outcome(turn) is TurnOutcome.TALKED_OVER:
            heard, end = heard_at_ms(turn), turn.events.get(AnchorEvent.USER_SPEECH_END)
            if heard is not None and end is not None:
                return (heard - (end - speech_end_in_clip_ms)) / 1000.0
    return None


def live_figures(
    traces: Sequence[TurnTrace],
    clips: Sequence[TurnClip],
    *,
    speech_end_ms: Callable[[TurnClip, str], float] | None = None,
) -> dict[str, Any]:
    """Per transport, the complete and the paused clips' figures (the module's docstring).
    ``speech_end_ms(clip, transport)`` is where speech ends in the clip as that transport
    played it (read from the audio by default)."""
    end_of = speech_end_ms or _speech_end_ms
    by_id = {c.id: c for c in clips}
    grouped: dict[str, dict[str, list[TurnTrace]]] = {}
    for trace in traces:
        clip_id = trace.annotations.get("clip_id")
        if not isinstance(clip_id, str) or clip_id not in by_id:
            continue
        transport = transport_of(str(trace.annotations.get("variant", "full")))
        grouped.setdefault(transport, {}).setdefault(clip_id, []).append(trace)
    result: dict[str, Any] = {}
    for transport, per_clip in grouped.items():
        complete = {k: v for k, v in per_clip.items() if by_id[k].kind == "complete"}
        paused = [
            _paused_result(by_id[k], v, end_of(by_id[k], transport))
            for k, v in per_clip.items()
            if by_id[k].kind == "paused"
        ]
        result[transport] = {
            "complete": _complete_figures(complete),
            "paused": paused_figures(paused),
            "paused_clips": [asdict(p) for p in paused],
        }
    return result


def _speech_end_ms(clip: TurnClip, transport: str) -> float:
    audio, rate = played_audio(clip.clip, transport)
    return speech_bounds_ms(audio, rate)[1]


def _complete_figures(per_clip: Mapping[str, Sequence[TurnTrace]]) -> dict[str, Any]:
    turns = [t for ts in per_clip.values() for t in ts]
    outcomes = Counter(str(turn_outcome(t)) for t in turns)
    clip_outcomes = Counter(clip_outcome(ts) for ts in per_clip.values())
    return {
        "clips": len(per_clip),
        "turns": len(turns),
        "outcomes": {str(o): outcomes.get(str(o), 0) for o in TurnOutcome},
        "clip_outcomes": dict(sorted(clip_outcomes.items())),
        "voice_to_voice_ms": latency_stats(_voice_to_voice(turns)),
    }


def _paused_result(clip: TurnClip, turns: Sequence[TurnTrace], end_ms: float) -> PausedClipResult:
    assert clip.pause_s is not None
    assert clip.pause_at_s is not None
    heard = _heard_in_clip_s(turns, end_ms)
    return PausedClipResult(
        clip_id=clip.id,
        source_id=clip.source_id,
        pause_s=clip.pause_s,
        outcome=clip_outcome(turns),
        heard_at_s=None if heard is None else round(heard, 3),
        into_pause=heard is not None and heard >= clip.pause_at_s - 0.02,
        withdrawn=sum(turn_outcome(t) is TurnOutcome.WITHDRAWN for t in turns),
    )


def _bucket(results: Sequence[PausedClipResult]) -> dict[str, Any]:
    talked = sum(r.outcome == "talked_over" for r in results)
    return {
        "clips": len(results),
        "talked_over": talked,
        "talk_over_rate": talked / len(results) if results else None,
        "into_pause": sum(r.into_pause for r in results),
        "withdrawn": sum(r.withdrawn for r in results),
        "answered": sum(r.outcome == "answered" for r in results),
        "unanswered": sum(r.outcome == "unanswered" for r in results),
        "failed": sum(r.outcome == "failed" for r in results),
    }


def paused_figures(results: Sequence[PausedClipResult]) -> dict[str, Any]:
    lengths = sorted({r.pause_s for r in results} | set(PAUSES_S))
    low, high = TARGET_BUCKET_S
    return {
        "by_pause": [
            {"pause_s": length} | _bucket([r for r in results if r.pause_s == length])
            for length in lengths
        ],
        "target_bucket": {"pause_s": [low, high]}
        | _bucket([r for r in results if low <= r.pause_s <= high]),
        "all": _bucket(results),
    }


# ---------------------------------------------------------------------------------- offline


@dataclass(frozen=True)
class Heard:
    """What whisper made of a clip (or of the audio before its pause), and its P(complete)."""

    clip_id: str
    text: str
    p: float | None


def line_audio(pcm: PCM16, rate: int) -> PCM16:
    """16 kHz audio as the engine hears it from a phone line: 8 kHz, μ-law, back to 16 kHz."""
    narrow = pcm if rate == TELEPHONE_RATE else resample(pcm, rate, TELEPHONE_RATE)
    return resample(ulaw_decode(ulaw_encode(narrow)), TELEPHONE_RATE, SPEECH_RATE)


def engine_audio(clip: TurnClip, telephone: bool) -> PCM16:
    """The clip as the engine's STT receives it (16 kHz), in process or over the phone."""
    if not telephone:
        return read_audio(clip.clip.path, SPEECH_RATE)
    return line_audio(
        read_audio(clip.clip.telephone_path or clip.clip.path, TELEPHONE_RATE), TELEPHONE_RATE
    )


def offline_cases(
    clips: Sequence[TurnClip],
    transcribe: Callable[[PCM16], str],
    score: Callable[[str], float] | None,
    *,
    telephone: bool = False,
) -> tuple[list[PausedCase], list[Heard], list[Heard]]:
    """The paused cases of the curve, whisper on every complete clip, and whisper on the audio
    before each pause (one decode per source and cut: the pause lengths share it). Without
    ``score``, the cases' P is 0 and the heard texts carry none."""
    complete: list[Heard] = []
    prefixes: dict[tuple[str, float], Heard] = {}
    cases: list[PausedCase] = []
    for clip in clips:
        if clip.kind == "complete":
            text = transcribe(engine_audio(clip, telephone))
            complete.append(Heard(clip.id, text, score(text) if score else None))
            continue
        assert clip.pause_at_s is not None
        assert clip.pause_s is not None
        key = (clip.source_id, clip.pause_at_s)
        if key not in prefixes:
            audio = engine_audio(clip, telephone)
            text = transcribe(audio[: round(clip.pause_at_s * SPEECH_RATE)])
            prefixes[key] = Heard(clip.id, text, score(text) if score else None)
        heard = prefixes[key]
        silence = clip.silence_s if clip.silence_s is not None else clip.pause_s
        cases.append(PausedCase(clip.id, clip.pause_s, 1000.0 * silence, heard.p or 0.0))
    return cases, complete, list(prefixes.values())


def tradeoff_figures(
    cases: Sequence[PausedCase], complete_p: Sequence[float] | None, options: EndOfTurnConfig
) -> dict[str, Any]:
    """Both rules' curves over every paused case and over the target bucket; the adaptive
    rule (and the configured setting) only with the text model's P."""
    result: dict[str, Any] = {}
    waits = list(complete_p) if complete_p is not None else []
    for name, chosen in (
        ("all", list(cases)),
        ("target_bucket", [c for c in cases if in_bucket(c)]),
    ):
        curves: dict[str, Any] = {"fixed": fixed_curve(chosen, waits).as_dict()}
        if complete_p is not None:
            curves["adaptive"] = adaptive_curve(chosen, waits, options).as_dict()
            curves["at_setting"] = asdict(at_setting(chosen, waits, options))
        result[name] = curves
    return result


# ---------------------------------------------------------------------------------- text model


def reference_prefixes(text: str) -> list[tuple[str, bool]]:
    """``text`` cut at every mid-sentence word boundary (after words 1 … n−1, not where a
    sentence ends), each with whether its last word clearly leaves the sentence unfinished."""
    tokens = text.split()
    return [
        (" ".join(tokens[:k]), normalised(tokens[k - 1]) in UNFINISHED)
        for k in range(1, len(tokens))
        if not ends_sentence(tokens[k - 1])
    ]


@dataclass
class Accuracy:
    label: str
    """``complete`` or ``incomplete``: what every utterance of the set is."""
    count: int = 0
    right: int = 0
    wrong: list[dict[str, Any]] = field(default_factory=list)
    """The utterances classified wrong, with their P."""

    @property
    def accuracy(self) -> float | None:
        return self.right / self.count if self.count else None

    def add(self, text: str, p: float, threshold: float) -> None:
        self.count += 1
        if (p >= threshold) == (self.label == "complete"):
            self.right += 1
        else:
            self.wrong.append({"text": text, "p": round(p, 4)})

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "count": self.count,
            "right": self.right,
            "accuracy": self.accuracy,
            "wrong": self.wrong,
        }


def text_model_accuracy(
    score: Callable[[str], float],
    threshold: float,
    references: Sequence[str],
    complete_heard: Sequence[Heard],
    prefix_heard: Sequence[Heard],
) -> dict[str, Any]:
    """Accuracy at ``threshold`` on each set: the reference transcripts (each distinct one
    once), complete; their mid-sentence prefixes, incomplete — all, and those whose last word
    leaves the sentence clearly unfinished; whisper's complete transcripts; whisper's
    transcripts before the pauses, incomplete."""
    sets = {
        "reference_complete": Accuracy("complete"),
        "reference_prefixes": Accuracy("incomplete"),
        "reference_prefixes_clearly_unfinished": Accuracy("incomplete"),
        "whisper_complete": Accuracy("complete"),
        "whisper_prefixes": Accuracy("incomplete"),
    }
    for text in dict.fromkeys(references):
        sets["reference_complete"].add(text, score(text), threshold)
        for prefix, unfinished in reference_prefixes(text):
            p = score(prefix)
            sets["reference_prefixes"].add(prefix, p, threshold)
            if unfinished:
                sets["reference_prefixes_clearly_unfinished"].add(prefix, p, threshold)
    for heard in complete_heard:
        sets["whisper_complete"].add(heard.text, score(heard.text), threshold)
    for heard in prefix_heard:
        sets["whisper_prefixes"].add(heard.text, score(heard.text), threshold)
    return {"threshold": threshold} | {name: acc.as_dict() for name, acc in sets.items()}


# ---------------------------------------------------------------------------------- together


@dataclass(frozen=True)
class Scorer:
    """An end-of-turn model as the offline report uses it: P(complete) of a transcript (no
    agent turn: the clips answer nothing), and the threshold its accuracy is counted at."""

    score: Callable[[str], float]
    threshold: float


def offline_report(
    clips: Sequence[TurnClip],
    config: CadenceConfig,
    *,
    telephone: bool,
    scorers: Mapping[str, Scorer],
) -> dict[str, tuple[dict[str, Any], dict[str, Any] | None]]:
    """For each model of ``scorers`` (none: the fixed wait alone), the trade-off and the
    model's accuracy on one audio path (16 kHz in process, or the phone line), with the
    configured transcriber — the real whisper, each distinct audio decoded once for all."""
    transcriber = load_stt(config.models.stt, config.threads)
    decoded: dict[bytes, str] = {}

    def transcribe(pcm: PCM16) -> str:
        key = hashlib.sha1(pcm.tobytes()).digest()
        if key not in decoded:
            decoded[key] = transcriber.transcribe_blocking(pcm).text
        return decoded[key]

    out: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {}
    runs: list[tuple[str, Scorer | None]] = [*scorers.items()] or [("no", None)]
    for name, scorer in runs:
        score = None if scorer is None else scorer.score
        cases, complete, prefixes = offline_cases(clips, transcribe, score, telephone=telephone)
        complete_p = None if scorer is None else [h.p or 0.0 for h in complete]
        figures = tradeoff_figures(cases, complete_p, config.turn.end_of_turn)
        figures["cases"] = [asdict(c) for c in cases]
        figures["heard_complete"] = [asdict(h) for h in complete]
        figures["heard_prefixes"] = [asdict(h) for h in prefixes]
        accuracy = None
        if scorer is not None:
            references = [c.clip.text for c in clips if c.kind == "complete"]
            accuracy = text_model_accuracy(
                scorer.score, scorer.threshold, references, complete, prefixes
            )
        out[name] = (figures, accuracy)
    return out


def end_of_turn_scorers(config: CadenceConfig) -> tuple[dict[str, Scorer], dict[str, str]]:
    """The language model and the text model, side by side, each at its own threshold — and
    why a model is missing, when one is."""
    scorers: dict[str, Scorer] = {}
    errors: dict[str, str] = {}
    try:
        lm = load_turn_end_model(config.models.lm)
        session = lm.session()
        scorers["lm"] = Scorer(lambda text: session.probability(text), lm.calibration.threshold)
    except PretrainedModelError as exc:
        errors["lm"] = str(exc)
    text_model, error = load_text_model()
    if text_model is not None:
        scorers["text"] = Scorer(lambda text: text_model.score(text), text_model.threshold)
    if error is not None:
        errors["text"] = error
    return scorers, errors


def load_text_model() -> tuple[TextEndOfTurnModel | None, str | None]:
    """The shipped text end-of-turn model, or why there is none."""
    try:
        return TextEndOfTurnModel.load(), None
    except TextEndOfTurnModelError as exc:
        return None, str(exc)


def recorded_metrics(model: TextEndOfTurnModel | None) -> dict[str, Any] | None:
    """What ``train-turn-model`` recorded of its own evaluation in the weights' metadata: the
    entries about the test corpus (sgd_test) and the validation corpus."""
    if model is None:
        return None
    recorded = {
        key: value
        for key, value in model.metadata.items()
        if "test" in key or "validation" in key or key == "metrics"
    }
    return recorded or None


# ---------------------------------------------------------------------------------- report


def write_report(report: Mapping[str, Any], out: Path) -> None:
    """``turn_taking.json``, ``turn_taking.md`` and ``tradeoff.png`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / JSON_FILE).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (out / MARKDOWN_FILE).write_text(render_markdown(report), encoding="utf-8")
    figure = tradeoff_plot(report.get("tradeoff", {}))
    FigureCanvasAgg(figure)  # no pyplot, no display (as the budget report draws)
    figure.savefig(out / PLOT_FILE, dpi=120)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f} %"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f} ms"


def _history(text: str | None) -> str:
    return "–" if text is None else (text or "(empty)")


def _needed_line(curve: Mapping[str, Any], rule: str) -> str:
    needed = curve.get("needed")
    if needed is None:
        return f"{rule}: no setting in the sweep keeps talk-overs under {_pct(TARGET_RATE)}"
    if curve["rule"] == "fixed":
        return (
            f"{rule}: W = {_ms(needed['setting_ms'])} ({_pct(needed['talk_over_rate'])} "
            f"talked over); every complete turn waits {_ms(needed['mean_wait_ms'])}"
        )
    return (
        f"{rule}: max_wait_ms = {_ms(needed['setting_ms'])} "
        f"({_pct(needed['talk_over_rate'])} talked over); complete turns wait "
        f"{_ms(needed['mean_wait_ms'])} on average, p90 {_ms(needed['p90_wait_ms'])}"
    )


def render_markdown(report: Mapping[str, Any]) -> str:
    lines = ["# Turn-taking", ""]
    lines += [
        f"Manifest `{report.get('manifest')}`; {report.get('machine', '')}.",
        f"Command: `{report.get('command')}`.",
        f"End of turn: `{json.dumps(report.get('end_of_turn'))}`.",
        "",
    ]
    for transport, live in report.get("live", {}).items():
        complete, paused = live["complete"], live["paused"]
        v2v = complete["voice_to_voice_ms"]
        outcomes = ", ".join(f"{k} {v}" for k, v in complete["outcomes"].items() if v)
        lines += [
            f"## {transport}",
            "",
            f"**Complete clips** ({complete['clips']} clips, {complete['turns']} turns): "
            f"voice-to-voice p50 {_ms(v2v['p50'])}, p90 {_ms(v2v['p90'])} over "
            f"{v2v['count']} turns answered after the end of speech. Turns: {outcomes or '–'}.",
            "",
            "**Paused clips**: replies heard before the true end of speech.",
            "",
            "| pause | clips | talked over | rate | of them in/after the pause | "
            "early commits withdrawn | answered after the end |",
            "|---|---|---|---|---|---|---|",
        ]
        rows = [*paused["by_pause"], paused["target_bucket"], paused["all"]]
        names = [f"{r['pause_s']} s" for r in paused["by_pause"]] + ["**0.5–1 s**", "all"]
        for name, row in zip(names, rows, strict=True):
            lines.append(
                f"| {name} | {row['clips']} | {row['talked_over']} | "
                f"{_pct(row['talk_over_rate'])} | {row['into_pause']} | {row['withdrawn']} | "
                f"{row['answered']} |"
            )
        lines.append("")
        false = live.get("false_interruptions")
        if false:
            summary = live.get("false_interruptions_summary") or {}
            lines += [
                f"**False interruptions**: a sound played over the reply to "
                f"`{live.get('question')}`, {AFTER_HEARD_MS:.0f} ms after it was first heard. "
                f"{summary.get('false_interruptions', '–')} of {summary.get('soft_sounds', '–')} "
                f"backchannels and noises cut the reply, {summary.get('resumed', '–')} resumed "
                f"it; {summary.get('words_cut', '–')} of {summary.get('words', '–')} real "
                "interruptions cut it.",
                "",
                "| sound | kind | length | should | did | reply heard after it | "
                "the agent's turn in the history |",
                "|---|---|---|---|---|---|---|",
            ]
            for case in false:
                lines.append(
                    f"| {case['name']} | {case['kind']} | {_ms(case['sound_ms'])} | "
                    f"{case.get('expected', '–')} | {case['result']} | "
                    f"{_ms(case.get('reply_ms_after'))} | {_history(case.get('heard_text'))} |"
                )
            lines.append("")
    tradeoff = report.get("tradeoff", {})
    if tradeoff:
        lines += [
            "## The trade-off (offline)",
            "",
            "A rule answers into a pause when its wait is shorter than the pause's silence "
            "(as the engine's endpointer measures it); a complete turn pays the rule's wait "
            "at its P.",
            "",
        ]
        for audio, figures in tradeoff.items():
            for scope, curves in figures.items():
                if scope not in ("all", "target_bucket"):
                    continue
                label = "every pause" if scope == "all" else "pauses of 0.5–1 s"
                lines.append(
                    f"**{audio}, {label}** ({curves['fixed']['cases']} paused, "
                    f"{curves['fixed']['complete_turns']} complete): the smallest wait under "
                    f"{_pct(TARGET_RATE)} talk-overs —"
                )
                lines.append("")
                lines.append(f"- {_needed_line(curves['fixed'], 'fixed wait')}")
                if "adaptive" in curves:
                    lines.append(f"- {_needed_line(curves['adaptive'], 'adaptive wait')}")
                    at = curves["at_setting"]
                    lines.append(
                        f"- at the configured setting (max_wait_ms {_ms(at['setting_ms'])}): "
                        f"{_pct(at['talk_over_rate'])} talked over, complete turns wait "
                        f"{_ms(at['mean_wait_ms'])} on average, p90 {_ms(at['p90_wait_ms'])}"
                    )
                lines.append("")
        lines += [f"![trade-off]({PLOT_FILE})", ""]
    for name, model in _models(report).items():
        lines += [f"## The {name} model outside its training domains", ""]
        if model.get("error"):
            lines += [f"Not measured: {model['error']}", ""]
        for audio, acc in model.get("accuracy", {}).items():
            lines += [
                f"**{audio}** (threshold {acc['threshold']:.3f}):",
                "",
                "| set | label | utterances | right | accuracy |",
                "|---|---|---|---|---|",
            ]
            for set_name, row in acc.items():
                if set_name == "threshold":
                    continue
                lines.append(
                    f"| {set_name} | {row['label']} | {row['count']} | {row['right']} | "
                    f"{_pct(row['accuracy'])} |"
                )
            lines.append("")
        if model.get("recorded"):
            lines += [
                "Recorded by `train-turn-model` (sgd_test and the rest), from the weights' "
                f"metadata: `{json.dumps(model['recorded'])[:1500]}`",
                "",
            ]
    return "\n".join(lines)


def _models(report: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The end-of-turn models the report measured (reports before the language model have the
    text model alone, as ``text_model``)."""
    if "end_of_turn_models" in report:
        return dict(report["end_of_turn_models"])
    return {"text": report["text_model"]} if report.get("text_model") else {}


def tradeoff_plot(tradeoff: Mapping[str, Any]) -> Figure:
    """Talk-over rate against the wait complete turns pay, both rules, every audio path."""
    fig = Figure(figsize=(7.5, 4.8))
    ax = fig.add_subplot()
    styles = {"all": "-", "target_bucket": "--"}
    colors = {"fixed": "C0", "adaptive": "C1"}
    drawn = False
    for number, (audio, figures) in enumerate(tradeoff.items()):
        for scope, curves in figures.items():
            if scope not in styles:
                continue
            for rule in ("fixed", "adaptive"):
                curve = curves.get(rule)
                if not curve or not curve["points"] or (rule == "fixed" and number > 0):
                    continue  # the fixed wait reads no transcript: one audio path draws it
                points = [p for p in curve["points"] if p["talk_over_rate"] is not None]
                if rule == "adaptive":
                    points = [p for p in points if p["mean_wait_ms"] is not None]
                xs = [p["mean_wait_ms"] if rule == "adaptive" else p["setting_ms"] for p in points]
                ys = [100 * p["talk_over_rate"] for p in points]
                label = f"{rule}, {audio}, {'all pauses' if scope == 'all' else '0.5–1 s'}"
                ax.plot(
                    xs,
                    ys,
                    styles[scope],
                    color=colors[rule],
                    alpha=max(0.3, 1.0 - 0.2 * number),
                    label=label,
                )
                drawn = True
            at = curves.get("at_setting")
            if at and at["talk_over_rate"] is not None and scope == "target_bucket":
                ax.plot(
                    [at["mean_wait_ms"]],
                    [100 * at["talk_over_rate"]],
                    "o",
                    color="C3",
                    label=f"configured, {audio}, 0.5–1 s",
                )
    ax.axhline(100 * TARGET_RATE, color="grey", linestyle=":", label="5 % target")
    ax.set_xlabel("wait paid by a complete turn, ms (adaptive: mean)")
    ax.set_ylabel("mid-sentence pauses answered into, %")
    ax.set_title("Talk-overs against the wait")
    ax.set_ylim(0, 100)
    if drawn:
        ax.legend(fontsize=7, loc="upper right")
    else:
        ax.text(0.5, 0.5, "no paused clips", transform=ax.transAxes, ha="center")
    fig.tight_layout()
    return fig
