"""The offline half of ``cadence bench-turns``: the text the engine would see at each pause of
the paused clips (whisper's transcript of the audio before it) and at the end of each complete
clip, scored by the end-of-turn models — which gives the trade-off curve of
``tooling/bench/tradeoff.py`` for any setting without a rerun, and each model's accuracy on
utterances from outside its training domains.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from cadence.llm.pretrained import PretrainedModelError
from cadence.pipeline.config import CadenceConfig, EndOfTurnConfig, VADConfig
from cadence.pipeline.end_of_turn import with_counted_digits
from cadence.pipeline.model_loading import load_stt, load_turn_end_model
from cadence.tooling.bench.pause_points import (
    UNFINISHED,
    ends_sentence,
    engine_pauses,
    normalised,
)
from cadence.tooling.bench.tradeoff import (
    PausedCase,
    at_setting,
    continuous_curve,
    field_figures,
    fixed_curve,
    in_bucket,
)
from cadence.tooling.bench.turn_taking import (
    SPEECH_RATE,
    TELEPHONE_RATE,
    TurnClip,
)
from cadence.voice.audio import PCM16, resample, ulaw_decode, ulaw_encode
from cadence.voice.audio.wavfile import read_audio
from cadence.voice.turn import TextEndOfTurnModel, TextEndOfTurnModelError


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
    score: Callable[[str, str | None], float] | None,
    *,
    telephone: bool = False,
    vad: VADConfig | None = None,
) -> tuple[list[PausedCase], list[Heard], list[Heard]]:
    """Every mid-turn pause of the clips as a case — the speaker's own pauses in each complete
    clip (as the engine's VAD hears them) and the pause inserted into each paused clip —
    whisper on every complete clip (its true end), and whisper on the audio before each pause
    (one decode per source and cut: the inserted pause lengths share it). Without ``score``,
    the cases' P is 0 and the heard texts carry none."""
    complete: list[Heard] = []
    prefixes: dict[tuple[str, float], Heard] = {}
    cases: list[PausedCase] = []

    def heard(clip: TurnClip, audio: PCM16) -> Heard:
        text = transcribe(audio)
        return Heard(clip.id, text, score(text, clip.agent) if score else None)

    def heard_before(clip: TurnClip, key: tuple[str, float], audio: PCM16, at_s: float) -> Heard:
        if key not in prefixes:
            prefixes[key] = heard(clip, audio[: round(at_s * SPEECH_RATE)])
        return prefixes[key]

    for clip in clips:
        audio = engine_audio(clip, telephone)
        if clip.kind == "complete":
            complete.append(heard(clip, audio))
            pauses, _ = engine_pauses(audio, SPEECH_RATE, vad)
            for start_ms, end_ms in pauses:
                heard_at = heard_before(clip, (clip.id, start_ms), audio, start_ms / 1000.0)
                silence_ms = end_ms - start_ms
                at_s = start_ms / 1000.0
                case = PausedCase(clip.id, silence_ms / 1000.0, silence_ms, heard_at.p or 0.0)
                cases.append(replace(case, inserted=False, at_s=at_s))
            continue
        assert clip.pause_at_s is not None
        assert clip.pause_s is not None
        heard_at = heard_before(clip, (clip.source_id, clip.pause_at_s), audio, clip.pause_at_s)
        silence = clip.silence_s if clip.silence_s is not None else clip.pause_s
        case = PausedCase(clip.id, clip.pause_s, 1000.0 * silence, heard_at.p or 0.0)
        cases.append(replace(case, at_s=clip.pause_at_s))
    return cases, complete, list(prefixes.values())


def tradeoff_figures(
    cases: Sequence[PausedCase], complete_p: Sequence[float] | None, options: EndOfTurnConfig
) -> dict[str, Any]:
    """Both rules' curves and the field's readings of them, over every mid-turn pause and
    over the inserted pauses of the target bucket; the continuous rule (and the configured
    setting) only with a model's P."""
    result: dict[str, Any] = {}
    waits = list(complete_p) if complete_p is not None else []
    for name, chosen in (
        ("all", list(cases)),
        ("target_bucket", [c for c in cases if in_bucket(c)]),
    ):
        fixed = fixed_curve(chosen, waits)
        curves: dict[str, Any] = {"fixed": fixed.as_dict()}
        field: dict[str, Any] = {"fixed": field_figures(fixed)}
        if complete_p is not None:
            continuous = continuous_curve(chosen, waits, options)
            curves["continuous"] = continuous.as_dict()
            curves["at_setting"] = asdict(at_setting(chosen, waits, options))
            field["continuous"] = field_figures(continuous)
        curves["field"] = field
        curves["pauses"] = {"count": len(chosen), "own": sum(not c.inserted for c in chosen)}
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
    """An end-of-turn model as the offline report uses it: P(complete) of a transcript after
    the agent's words (``None``: the read-speech clips answer nothing), and the threshold its
    accuracy is counted at."""

    score: Callable[[str, str | None], float]
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
        cases, complete, prefixes = offline_cases(
            clips, transcribe, score, telephone=telephone, vad=config.vad
        )
        complete_p = None if scorer is None else [h.p or 0.0 for h in complete]
        figures = tradeoff_figures(cases, complete_p, config.turn.end_of_turn)
        figures["cases"] = [asdict(c) for c in cases]
        figures["heard_complete"] = [asdict(h) for h in complete]
        figures["heard_prefixes"] = [asdict(h) for h in prefixes]
        accuracy = None
        if scorer is not None:
            references = [c.clip.text for c in clips if c.kind == "complete"]
            accuracy = text_model_accuracy(
                lambda text: scorer.score(text, None),  # noqa: B023 (called within the loop)
                scorer.threshold,
                references,
                complete,
                prefixes,
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
        scorers["lm"] = Scorer(
            lambda text, agent: with_counted_digits(session.probability(text, agent), text, agent),
            lm.calibration.threshold,
        )
    except PretrainedModelError as exc:
        errors["lm"] = str(exc)
    text_model, error = load_text_model()
    if text_model is not None:
        scorers["text"] = Scorer(
            lambda text, agent: with_counted_digits(
                text_model.score(text, agent_text=agent), text, agent
            ),
            text_model.threshold,
        )
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
