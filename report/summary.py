"""The schema of ``summary.json``: what a latency report claims, in a form a program can check.

``ReportSummary.model_json_schema()`` is the machine-readable schema; ``docs/report.md``
explains every field. A change of meaning bumps ``SCHEMA_ID``.
"""

from __future__ import annotations

from typing import Any, Final, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cadence.pipeline.frames import ToolOutcome
from cadence.pipeline.tracing import TurnOutcome
from cadence.report.stages import STAGE_NAMES

SCHEMA_ID: Final = "cadence.report/4"

TOOL_OUTCOMES: Final[tuple[ToolOutcome, ...]] = get_args(ToolOutcome)
"""Every outcome of a tool call, in the order ``calls`` lists them."""


class _Model(BaseModel):
    # A summary is a record of a run: unknown keys are errors and nothing is edited after.
    model_config = ConfigDict(extra="forbid", frozen=True)


class LatencyStats(_Model):
    """Medians and tails of one latency over the turns that measured it (never a mean: one
    stalled turn must not hide in an average)."""

    count: int = Field(ge=0, description="turns that have both anchors of this latency")
    p50: float | None
    p95: float | None
    p99: float | None
    max: float | None


class SpeculationCounts(_Model):
    hits: int = Field(ge=0, description="turns answered from the speculative transcript")
    misses: int = Field(ge=0, description="speculative decodes that were not used")
    hit_rate: float | None = Field(description="hits / (hits + misses); null with neither")


class DiscardedStats(_Model):
    count: int = Field(ge=0)
    total_ms: float = Field(description="summed duration of the thrown-away work")


class ToolStats(_Model):
    """The tool calls of the turns whose reply called any. A turn's tool time is the wall time
    from its first call's start to its last call's end, not the calls' sum: the calls of one
    round run at once, and what the caller waits through is the time they take together."""

    turns: int = Field(ge=0, description="turns whose reply called at least one tool")
    calls: dict[ToolOutcome, int] = Field(
        description="the calls of those turns by outcome, every outcome, in the order of "
        "`ToolOutcome`"
    )
    time_ms: LatencyStats = Field(
        description="per turn that called tools: first call's start → last call's end"
    )
    voice_to_voice_share: LatencyStats = Field(
        description="per turn that called tools and was answered after the end of speech: its "
        "tool time / its voice-to-voice (a fraction; it passes 1 where calls ran before the "
        "end of speech, for a preemptive reply, or on after the first words)"
    )

    @model_validator(mode="after")
    def _every_outcome(self) -> ToolStats:
        if tuple(self.calls) != TOOL_OUTCOMES:
            raise ValueError(f"calls must count {', '.join(TOOL_OUTCOMES)}, in that order")
        return self


class TurnRow(_Model):
    """One turn of the run, as the per-turn table shows it."""

    session_id: str
    turn: int
    clip_id: str | None
    transcript: str | None = Field(description="what the engine heard the caller say")
    outcome: TurnOutcome
    voice_to_voice_ms: float | None = Field(
        description="end of speech → the report's end anchor; negative when talked over"
    )
    decision_to_sound_ms: float | None = Field(
        description="the end-of-turn decision (`endpoint`) → the report's end anchor"
    )
    stages_ms: dict[str, float | None] = Field(description="the stages and `playback`")


class VariantSummary(_Model):
    """The figures of one variant (one ablation) of a run."""

    turns: int = Field(ge=0, description="every turn, whatever became of it")
    sessions: int = Field(ge=0)
    concurrency: int | None = Field(
        description="sessions run in parallel (the `concurrency` annotation); null if unknown"
    )
    outcomes: dict[TurnOutcome, int] = Field(
        description="turns by outcome (docs/trace-schema.md), every outcome, summing to `turns`"
    )
    talked_over_by_ms: LatencyStats = Field(
        description="how long before the caller's end of speech each talked-over reply began"
    )
    barge_ins: int = Field(
        ge=0, description="turns whose reply the caller cut (`interrupted`), whatever else"
    )
    end_anchor: Literal["audio_heard_first", "audio_out_first"] = Field(
        description="where `voice_to_voice_ms` ends: what the caller heard, when the caller "
        "measured every turn; else the server's first frame sent"
    )
    voice_to_voice_ms: LatencyStats = Field(
        description="end of speech → `end_anchor`, over the turns answered after the end of "
        "speech (answered or interrupted)"
    )
    server_voice_to_voice_ms: LatencyStats = Field(
        description="end of speech → first reply frame sent (`audio_out_first`), same turns"
    )
    decision_to_sound_ms: LatencyStats = Field(
        description="the end-of-turn decision (`endpoint`) → `end_anchor`, same turns: what "
        "was still to do once the turn was declared over (0 when the first audio was waiting)"
    )
    stages_ms: dict[str, LatencyStats] = Field(
        description="endpoint, stt, llm_first_emit, tts_first_audio, transport; same turns"
    )
    playback_ms: LatencyStats = Field(
        description="first frame sent → first audible sound at the caller's end; same turns"
    )
    within_budget_fraction: float | None = Field(
        description="share of the caller's turns (all but withdrawn) answered after the end of "
        "speech within the voice-to-voice budget: talked-over, unanswered and failed turns are "
        "misses"
    )
    budget_turns: int = Field(ge=0, description="the caller's turns that share is taken over")
    llm_over_ceiling: int = Field(
        ge=0, description="turns whose LLM first emit exceeded the hard ceiling"
    )
    endpoints_before_speech_end: int = Field(
        ge=0, description="turns whose endpoint came before the end of speech (cut the caller)"
    )
    vad_end_error_ms: LatencyStats = Field(
        description="the VAD's end of speech (`vad_speech_end_ms`) − `user_speech_end`"
    )
    wer: float | None = Field(description="corpus WER of `transcript` against `reference`")
    wer_turns: int = Field(ge=0, description="turns that have both texts")
    speculation: SpeculationCounts
    discarded: dict[str, DiscardedStats] = Field(description="thrown-away work by kind")
    tools: ToolStats = Field(description="the tool calls of the turns that made any")
    per_turn: list[TurnRow] = Field(description="every turn, in trace order")

    @model_validator(mode="after")
    def _every_stage_and_outcome(self) -> VariantSummary:
        if tuple(self.stages_ms) != STAGE_NAMES:
            raise ValueError(f"stages_ms must have exactly {', '.join(STAGE_NAMES)} in order")
        if tuple(self.outcomes) != tuple(TurnOutcome) or sum(self.outcomes.values()) != self.turns:
            raise ValueError("outcomes must count every outcome, in order, summing to turns")
        return self


class ReportSummary(VariantSummary):
    """``summary.json``: the top level describes the primary variant (``full`` if the run has
    it, else the first in the traces); ``variants`` holds every variant side by side when the
    traces hold more than one."""

    schema_id: Literal["cadence.report/4"] = Field(default=SCHEMA_ID, alias="schema")
    variant: str = Field(description="name of the variant the top level describes")
    variants: dict[str, VariantSummary] = Field(
        description="every variant in trace order when there are several; empty otherwise"
    )
    budget_ms: dict[str, float] = Field(description="the latency budget the run was held to")
    config: dict[str, Any] | None = Field(description="the configuration of the run, if known")
    machine: str
    command: str | None = Field(description="the command line that produced the figures")

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2) + "\n"
