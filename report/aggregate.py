"""From turn traces to the figures of ``summary.json``.

A pure function of the traces (in their order) and the budget, so that ``cadence report`` on a
bench's ``traces.jsonl`` reproduces the bench's own summary to the last digit. Every turn has
one outcome and counts in ``turns`` and ``outcomes``; the latencies are those of the turns
answered after the end of speech; budget compliance is taken over every caller turn, a
talk-over, an unanswered or a failed one counting as a miss. Tool calls are counted over
every turn whose reply made any, and only those turns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cadence.core.stats import percentiles
from cadence.pipeline.config import BudgetConfig
from cadence.pipeline.tracing import (
    ANSWERED_IN_TIME,
    PLAYBACK,
    VOICE_TO_VOICE,
    AnchorEvent,
    TurnOutcome,
    TurnTrace,
    talked_over_by_ms,
    turn_outcome,
)
from cadence.report.anchor import decision_to_sound_ms, end_anchor, voice_to_voice_ms
from cadence.report.stages import STAGE_NAMES
from cadence.report.summary import (
    TOOL_OUTCOMES,
    DiscardedStats,
    LatencyStats,
    ReportSummary,
    SpeculationCounts,
    ToolStats,
    TurnRow,
    VariantSummary,
)
from cadence.report.variants import group_by_variant, primary_variant
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
    outcomes = [turn_outcome(turn) for turn in all_turns]
    anchor = end_anchor(all_turns)
    # A withdrawn turn was a false start of the turn that follows it: not a turn of the
    # caller's. Every other turn is one, and only an answer after its end can meet the budget.
    caller_turns = [o for o in outcomes if o is not TurnOutcome.WITHDRAWN]
    turns = [t for t, o in zip(all_turns, outcomes, strict=True) if o in ANSWERED_IN_TIME]
    voice_to_voice = [v for turn in turns if (v := voice_to_voice_ms(turn, anchor)) is not None]
    decision_to_sound = [
        v for turn in turns if (v := decision_to_sound_ms(turn, anchor)) is not None
    ]
    endpoint_delays = _samples(turns, "endpoint")
    transcribed = _transcribed(all_turns)
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
        outcomes={o: outcomes.count(o) for o in TurnOutcome},
        talked_over_by_ms=latency_stats(
            [v for turn in all_turns if (v := talked_over_by_ms(turn)) is not None]
        ),
        barge_ins=sum(AnchorEvent.INTERRUPTED in turn.events for turn in all_turns),
        end_anchor=anchor.value,
        voice_to_voice_ms=latency_stats(voice_to_voice),
        server_voice_to_voice_ms=latency_stats(_samples(turns, VOICE_TO_VOICE.name)),
        decision_to_sound_ms=latency_stats(decision_to_sound),
        stages_ms={name: latency_stats(_samples(turns, name)) for name in STAGE_NAMES},
        playback_ms=latency_stats(_samples(turns, PLAYBACK.name)),
        within_budget_fraction=(
            sum(v <= budget.voice_to_voice for v in voice_to_voice) / len(caller_turns)
            if caller_turns
            else None
        ),
        budget_turns=len(caller_turns),
        llm_over_ceiling=sum(
            v > budget.llm_first_emit_ceiling for v in _samples(turns, "llm_first_emit")
        ),
        endpoints_before_speech_end=sum(v < 0 for v in endpoint_delays),
        vad_end_error_ms=latency_stats(_vad_end_errors(turns)),
        wer=(
            word_error_rate([r for r, _ in transcribed], [t for _, t in transcribed])
            if transcribed
            else None
        ),
        wer_turns=len(transcribed),
        speculation=_speculation(all_turns),
        discarded=_discarded(all_turns),
        tools=_tools(all_turns, turns, anchor),
        per_turn=[
            _row(turn, outcome, anchor) for turn, outcome in zip(all_turns, outcomes, strict=True)
        ],
    )


def _row(turn: TurnTrace, outcome: TurnOutcome, anchor: AnchorEvent) -> TurnRow:
    clip, transcript = turn.annotations.get("clip_id"), turn.annotations.get("transcript")
    return TurnRow(
        session_id=turn.session_id,
        turn=turn.turn,
        clip_id=clip if isinstance(clip, str) else None,
        transcript=transcript if isinstance(transcript, str) else None,
        outcome=outcome,
        voice_to_voice_ms=voice_to_voice_ms(turn, anchor),
        decision_to_sound_ms=decision_to_sound_ms(turn, anchor),
        stages_ms={name: turn.latencies_ms[name] for name in (*STAGE_NAMES, PLAYBACK.name)},
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


def _tools(
    all_turns: Sequence[TurnTrace], answered: Sequence[TurnTrace], anchor: AnchorEvent
) -> ToolStats:
    """``answered``: the turns answered after the end of speech, the only ones whose
    voice-to-voice a share can be taken of."""
    called = [turn for turn in all_turns if turn.tools]
    outcomes = [call.outcome for turn in called for call in turn.tools]
    shares = [
        _tool_time_ms(turn) / v2v
        for turn in answered
        if turn.tools and (v2v := voice_to_voice_ms(turn, anchor)) is not None and v2v > 0
    ]
    return ToolStats(
        turns=len(called),
        calls={outcome: outcomes.count(outcome) for outcome in TOOL_OUTCOMES},
        time_ms=latency_stats([_tool_time_ms(turn) for turn in called]),
        voice_to_voice_share=latency_stats(shares),
    )


def _tool_time_ms(turn: TurnTrace) -> float:
    """First call's start → last call's end: calls may overlap, so not their sum."""
    return max(call.end_ms for call in turn.tools) - min(call.start_ms for call in turn.tools)


def _discarded(turns: Sequence[TurnTrace]) -> dict[str, DiscardedStats]:
    kinds: dict[str, list[float]] = {}
    for turn in turns:
        for work in turn.discarded:
            kinds.setdefault(work.kind, []).append(work.end_ms - work.start_ms)
    return {
        kind: DiscardedStats(count=len(spans), total_ms=sum(spans)) for kind, spans in kinds.items()
    }
