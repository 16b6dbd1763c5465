"""What both decoders share: their options and the statistics of one reply."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from cadence.llm.dialogue import ToolCall
from cadence.llm.tokenizer import SpecialIds


@dataclass(frozen=True)
class DecodingOptions:
    confidence_threshold: float = 0.7
    """τ: a denoising step commits every masked position at least this confident."""
    first_emit_budget_ms: float = 150.0
    """Deadline of the first block, from the start of the reply."""
    block_budget_ms: float = 150.0
    """Deadline of each later block, from its start (earlier words are being spoken)."""
    max_reply_tokens: int = 48
    """Length cap of one reply, end of turn included."""


@dataclass
class ReplyStats:
    """Filled in by a decoder as it produces one reply."""

    token_ids: list[int] = field(default_factory=list)
    """The reply's text tokens (without the end of turn)."""
    text: str = ""
    steps_per_block: list[int] = field(default_factory=list)
    """Denoising steps (forward passes) each block took; AR: one entry of 1 per token."""
    prefilled_tokens: int = 0
    """Context tokens computed for this reply (the rest came from the cache)."""
    start_ms: float = 0.0
    first_piece_ms: float | None = None
    end_ms: float = 0.0
    tool_calls: tuple[ToolCall, ...] = ()
    """The calls the reply ended with (a model that knows tools)."""
    unfilled_slots: tuple[str, ...] = ()
    """Result slots the reply named that the latest result could not fill (dropped from the
    text; ``llm/result_slots.py``)."""
    said_back: tuple[str, ...] = ()
    """Dates and times the model wrote that the caller never said and no result held,
    replaced by the caller's (``llm/result_slots.py``)."""
    stopped: bool = False
    """The reply was stopped before it ended (its reader was cancelled)."""


def never_in_reply(special: SpecialIds) -> torch.Tensor:
    """Ids a reply never contains (the mask and the speaker tokens, ``<result>``): decoders
    set their logits to -inf, so even a deadline-forced commit cannot pick them. A model that
    knows tools gets one more slot, ``<call>`` when the reply may not call any and the mask
    again when it may (``forbid_calls``): changed in place, the tensor stays the one a
    captured CUDA graph reads."""
    never = [special.mask, special.user, special.agent]
    if special.call is not None and special.result is not None:
        never += [special.result, special.call]
    return torch.tensor(never)


def forbid_calls(never: torch.Tensor, special: SpecialIds, forbidden: bool) -> None:
    """Set the ``<call>`` slot of ``never_in_reply``'s tensor for the next reply."""
    if special.call is not None:
        never[-1] = special.call if forbidden else special.mask
