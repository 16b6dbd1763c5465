"""How dialogues become token sequences, for training and for decoding alike.

Each turn is ``<speaker> text <eot>`` padded with ``<pad>`` to a whole number of blocks, so
every turn starts on a block boundary: a prompt is then prefilled in whole blocks, a reply's
blocks never straddle the context, and a finished turn's KV cache is exact whatever follows.
A reply starts with the given ``<agent>`` token in the first position of its first block.

A model whose tokenizer has the tool tokens (``DialogueTokenizer.knows_tools``) also reads and
writes tools: an agent turn that calls one is ``<agent> words <call> method key: value… <eot>``
(the words, if any, are spoken before the call), and the result is a turn of its own,
``<result> N results: key: value… <eot>`` (``llm/tool_text.py``). Where an agent turn, words
or call, repeats a field of the latest result, it holds the field's slot instead
(``llm/result_slots.py``): the model is trained to write slots, and reads its past turns with
them. A model without the tool tokens reads only what was said (``spoken_turns``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from cadence.llm.dialogue import ToolCall, Turn, spoken_turns
from cadence.llm.result_slots import (
    ReplyFacts,
    SlotRows,
    latest_rows,
    result_row,
    returned_values,
    with_slots,
)
from cadence.llm.spoken_values import said_values
from cadence.llm.tokenizer import DialogueTokenizer
from cadence.llm.tool_text import call_text, result_text


class Role(IntEnum):
    """What a position is for the losses."""

    CONTEXT = 0
    """Given: user turns, speaker tokens, the history."""
    REPLY = 1
    """An agent token to predict: text or the end of turn."""
    REPLY_PAD = 2
    """Padding after an agent's end of turn (the diffusion model predicts it too)."""


@dataclass(frozen=True)
class TokenWindow:
    """Consecutive turns of one dialogue as one training sequence."""

    ids: list[int]
    roles: list[Role]


class DialogueFormat:
    def __init__(self, tokenizer: DialogueTokenizer, block_size: int, max_turn_tokens: int) -> None:
        if max_turn_tokens % block_size or max_turn_tokens < 2 * block_size:
            raise ValueError("max_turn_tokens must be a multiple of block_size, at least two")
        self.tokenizer = tokenizer
        self.block_size = block_size
        self.max_turn_tokens = max_turn_tokens

    def encode_turn(
        self, turn: Turn, call: ToolCall | None = None, rows: SlotRows | None = None
    ) -> list[int]:
        """``<speaker> text <eot> <pad>…``; text beyond ``max_turn_tokens`` is cut. A tool
        turn is read knowing the ``call`` it answers (its arguments need not be repeated);
        an agent turn after a result holds slots for the values of its ``rows``."""
        special = self.tokenizer.special
        body: list[int]
        if turn.speaker == "tool":
            if special.result is None:
                raise ValueError("this model's tokenizer has no tool tokens: it reads no results")
            known = _arguments(call.arguments) if call is not None else {}
            body = [special.result, *self.tokenizer.encode(result_text(turn.text, known))]
        else:
            agent = turn.speaker == "agent"
            text = with_slots(turn.text, rows.words) if agent and rows else turn.text
            body = [special.agent if agent else special.user, *self.tokenizer.encode(text)]
            for tool_call in turn.tool_calls:
                if special.call is None:
                    raise ValueError("this model's tokenizer has no tool tokens: it calls none")
                arguments = {
                    key: with_slots(str(value), rows.calls) if rows else value
                    for key, value in _arguments(tool_call.arguments).items()
                }
                text = call_text(tool_call.name, arguments)
                body += [special.call, *self.tokenizer.encode(text)]
        ids = [*body[: self.max_turn_tokens - 1], special.end_of_turn]
        return ids + [special.pad] * (-len(ids) % self.block_size)

    def encode_turns(
        self, turns: Sequence[Turn], history: Sequence[Turn] | None = None
    ) -> list[list[int]]:
        """Each turn encoded, every tool turn with the call it answers and every agent turn
        with the latest result before it (both looked up in ``history``, the whole
        conversation ``turns`` are the end of, if given)."""
        history = history if history is not None else turns
        if list(history[len(history) - len(turns) :]) != list(turns):
            raise ValueError("the turns to encode must be the end of the history")
        calls = {call.id: call for turn in history for call in turn.tool_calls}
        rows: list[SlotRows | None] = [None] * len(turns)
        if self.tokenizer.knows_tools:
            rows = list(latest_rows(history)[len(history) - len(turns) :])
        return [
            self.encode_turn(turn, calls.get(turn.tool_call_id or ""), row)
            for turn, row in zip(turns, rows, strict=True)
        ]

    def reply_facts(self, history: Sequence[Turn]) -> ReplyFacts:
        """What a reply to ``history`` fills its slots from — the latest tool result's row —
        and checks the dates and times it says against — the caller's (:class:`ReplyFacts`);
        nothing if the model knows no tools (it never learned the SGD services' world)."""
        if not self.tokenizer.knows_tools:
            return ReplyFacts()
        row = next((result_row(t.text) for t in reversed(history) if t.speaker == "tool"), {})
        return ReplyFacts(row, said_values(history), returned_values(history))

    def visible(self, history: Sequence[Turn]) -> list[Turn]:
        """The turns this model reads: all of them if it knows tools, else what was said."""
        return list(history) if self.tokenizer.knows_tools else spoken_turns(history)

    def prompt(
        self, history: Sequence[Turn], history_turns: int, max_context_tokens: int
    ) -> list[int]:
        """Context for the next agent reply: the last ``history_turns`` turns it reads
        (``visible``), dropping the oldest until they fit ``max_context_tokens``, then
        ``<agent>`` to start the reply. The reply therefore starts at ``len(prompt) - 1``, a
        block boundary."""
        turns = self.visible(history)
        encoded = self.encode_turns(turns[-history_turns:], turns)
        while encoded and sum(map(len, encoded)) > max_context_tokens:
            encoded.pop(0)
        return [*(token for turn in encoded for token in turn), self.tokenizer.special.agent]

    def window(self, encoded_turns: Sequence[list[int]]) -> TokenWindow:
        """One training sequence from encoded turns; agent turns are the ones to predict."""
        special = self.tokenizer.special
        ids: list[int] = []
        roles: list[Role] = []
        for encoded in encoded_turns:
            ids += encoded
            if encoded[0] != special.agent:
                roles += [Role.CONTEXT] * len(encoded)
                continue
            roles.append(Role.CONTEXT)  # the speaker token is given
            roles += [Role.REPLY_PAD if t == special.pad else Role.REPLY for t in encoded[1:]]
        return TokenWindow(ids, roles)

    def windows(
        self,
        encoded_turns: Sequence[list[int]],
        max_tokens: int,
        max_turns: int,
        rng: random.Random,
    ) -> list[TokenWindow]:
        """Split one dialogue's encoded turns into windows of consecutive turns (at most
        ``max_turns`` turns and ``max_tokens`` tokens), starting at a random offset so that
        turns meet different amounts of context from one epoch to the next. Windows without
        an agent turn are dropped."""
        start = rng.randrange(min(2, len(encoded_turns))) if encoded_turns else 0
        result: list[TokenWindow] = []
        while start < len(encoded_turns):
            end, size = start, 0
            while end < len(encoded_turns) and end - start < max_turns:
                size += len(encoded_turns[end])
                if size > max_tokens and end > start:
                    break
                end += 1
            window = self.window(encoded_turns[start:end])
            if Role.REPLY in window.roles:
                result.append(window)
            start = end
        return result


def _arguments(text: str) -> dict[str, Any]:
    """A call's JSON arguments as a dict; ``{}`` for arguments that are not a JSON object
    (a remote model's malformed call, kept verbatim in the history)."""
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
