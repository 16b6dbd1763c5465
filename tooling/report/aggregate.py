"""From turn traces to the figures of ``summary.json``.

A pure function of the traces (in their order) and the budget, so that ``cadence report`` on a
bench's ``traces.jsonl`` reproduces the bench's own summary to the last digit. Each turn counts
in ``turns``; each latency is taken over the turns that have both of its anchors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cadence.pipeline.config import BudgetConfig
from cadence.pipeline.tracing import VOICE_TO_VOICE, AnchorEvent, TurnTrace
from cadence.tooling.bench.stats import percentiles
from cadence.tooling.report.stages import STAGE_NAMES
from cadence.tooling.report.summary import (
    DiscardedStats,
    LatencyStats,
    ReportSummary,
    SpeculationCounts,
    VariantSummary,
)
from cadence.tooling.report.variants import group_by_variant, primary_variant
from cadence.voice.stt import word_error_rate


def summarize(
    traces: Sequence[TurnTrace],
    budget: BudgetConfig,
    *,
    config: dict[str, Any] | None,
    machine: str,
    command: str | None,
) -> ReportSummary:
    """The whole report's figures; raises ``ValueError`` when there is no turn to report."""
    if not traces:
        raise ValueError("no turns to report")
    groups = group_by_variant(traces)
    by_name = {name: summarize_variant(turns, budget) for name, turns in groups.items()}
    primary = primary_variant(list(by_name))
    return ReportSummary(
        **by_name[primary].model_dump(),
        variant=primary,
        variants=by_name if len(by_name) > 1 else {},
        budget_ms=budget.model_dump(),
        config=config,
        machine=machine,
        command=command,
    )


def summarize_variant(all_turns: Sequence[TurnTrace], budget: BudgetConfig) -> VariantSummary:
    # A withdrawn turn was a false start of the turn that follows it, and a premature reply
    # was heard while the caller was still speaking (its voice-to-voice is negative): both
    # are counted on their own, and left out of the latencies of the turns answered in time.
    turns = [
        turn
        for turn in all_turns
        if turn.annotations.get("withdrawn") is not True
        and turn.annotations.get("premature") is not True
    ]
    voice_to_voice = _samples(turns, VOICE_TO_VOICE.name)
    endpoint_delays = _samples(turns, "endpoint")
    transcribed = _transcribed(turns)
    concurrency = [
        value
        for turn in turns
        if isinstance(value := turn.annotations.get("concurrency"), int)
        and not isinstance(value, bool)
    ]
    return VariantSummary(
        turns=len(all_turns),
        sessions=len({turn.session_id for turn in all_turns}),
        concurrency=max(concurrency, default=None),
        voice_to_voice_ms=latency_stats(voice_to_voice),
        stages_ms={name: latency_stats(_samples(turns, name)) for name in STAGE_NAMES},
        within_budget_fraction=(
            sum(v <= budget.voice_to_voice for v in voice_to_voice) / len(voice_to_voice)
            if voice_to_voice
            else None
        ),
        llm_over_ceiling=sum(
            v > budget.llm_first_emit_ceiling for v in _samples(turns, "llm_first_emit")
        ),
        endpoints_before_speech_end=sum(v < 0 for v in endpoint_delays),
        interrupted=sum(AnchorEvent.INTERRUPTED in turn.events for turn in turns),
        withdrawn=sum(turn.annotations.get("withdrawn") is True for turn in all_turns),
        premature=sum(turn.annotations.get("premature") is True for turn in all_turns),
        vad_end_error_ms=latency_stats(_vad_end_errors(turns)),
        wer=(
            word_error_rate([r for r, _ in transcribed], [t for _, t in transcribed])
            if transcribed
            else None
        ),
        wer_turns=len(transcribed),
        speculation=_speculation(all_turns),
        discarded=_discarded(all_turns),
    )


def latency_stats(samples: Sequence[float]) -> LatencyStats:
    return LatencyStats.model_validate({"count": len(samples), **percentiles(samples)})


def _samples(turns: Sequence[TurnTrace], name: str) -> list[float]:
    return [v for turn in turns if (v := turn.latencies_ms[name]) is not None]


def _vad_end_errors(turns: Sequence[TurnTrace]) -> list[float]:
    errors = []
    for turn in turns:
        estimate = turn.annotations.get("vad_speech_end_ms")
        truth = turn.events.get(AnchorEvent.USER_SPEECH_END)
        if isinstance(estimate, bool) or not isinstance(estimate, int | float) or truth is None:
            continue
        errors.append(float(estimate) - truth)
    return errors


def _transcribed(turns: Sequence[TurnTrace]) -> list[tuple[str, str]]:
    """(reference, transcript) of the turns that have both."""
    return [
        (reference, transcript)
        for turn in turns
        if isinstance(reference := turn.annotations.get("reference"), str)
        and reference.strip()
        and isinstance(transcript := turn.annotations.get("transcript"), str)
    ]


def _speculation(turns: Sequence[TurnTrace]) -> SpeculationCounts:
    flags = [turn.annotations.get("speculative_hit") for turn in turns]
    discarded_decodes = sum(work.kind == "stt_decode" for turn in turns for work in turn.discarded)
    hits = sum(flag is True for flag in flags)
    misses = discarded_decodes + sum(flag is False for flag in flags)
    return SpeculationCounts(
        hits=hits, misses=misses, hit_rate=hits / (hits + misses) if hits + misses else None
    )


def _discarded(turns: Sequence[TurnTrace]) -> dict[str, DiscardedStats]:
    kinds: dict[str, list[float]] = {}
    for turn in turns:
        for work in turn.discarded:
            kinds.setdefault(work.kind, []).append(work.end_ms - work.start_ms)
    return {
        kind: DiscardedStats(count=len(spans), total_ms=sum(spans)) for kind, spans in kinds.items()
    }
