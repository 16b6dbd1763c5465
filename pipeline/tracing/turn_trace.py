"""``TurnTrace``: everything recorded about one turn; one JSON line in a trace log.

The JSON form is documented in ``docs/trace-schema.md``; ``TurnTrace.model_json_schema()`` is
its machine-readable schema.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from cadence.pipeline.frames import ToolOutcome
from cadence.pipeline.tracing.anchors import ALL_LATENCIES, AnchorEvent, stage_latencies_ms

SCHEMA_ID: Final = "cadence.turn/1"

Annotation = str | int | float | bool | None


class DiscardedWork(BaseModel):
    """Speculative work that ran and was thrown away (a decode at a pause that speech
    interrupted, a reply generated on a transcript that changed)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str = Field(description="what ran, e.g. `stt_decode` or `llm_generation`")
    start_ms: float
    end_ms: float
    reason: str = Field(description="why it was thrown away")


class ToolCallRecord(BaseModel):
    """One tool call the reply made: its name, when it ran and what became of it, with the
    sizes of its arguments and result — never their values, which may hold what the caller
    said."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    round: int = Field(
        ge=1, description="1: called by the reply's first answer; 2: after those results; …"
    )
    start_ms: float
    end_ms: float
    outcome: ToolOutcome
    argument_bytes: int = Field(ge=0)
    result_bytes: int = Field(ge=0)


class TurnTrace(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_id: Literal["cadence.turn/1"] = Field(default=SCHEMA_ID, alias="schema")
    session_id: str
    turn: int = Field(ge=0, description="0-based index of the turn within its session")
    events: dict[AnchorEvent, float] = Field(
        default_factory=dict, description="anchor event → session time in ms"
    )
    discarded: list[DiscardedWork] = Field(default_factory=list)
    tools: list[ToolCallRecord] = Field(
        default_factory=list, description="the tool calls of the reply, in the order they ended"
    )
    annotations: dict[str, Annotation] = Field(
        default_factory=dict,
        description="free-form facts of the turn: transcript, reply, VAD estimate, ...",
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def latencies_ms(self) -> dict[str, float | None]:
        """Derived latencies (docs/trace-schema.md); ``None`` where an anchor is missing."""
        stages = stage_latencies_ms(self.events)
        return {
            latency.name: (
                stages[latency.name]
                if latency.name in stages
                else self.events[latency.end] - self.events[latency.start]
                if latency.start in self.events and latency.end in self.events
                else None
            )
            for latency in ALL_LATENCIES
        }

    def to_json_line(self) -> str:
        return self.model_dump_json(by_alias=True)

    @classmethod
    def from_json_line(cls, line: str) -> TurnTrace:
        # ``latencies_ms`` is derived, so it is recomputed rather than trusted from the file.
        return cls.model_validate_json(line, by_alias=True, extra="ignore")
