"""A conversation with tools in SmolLM2's ChatML, for training its adapters and for decoding
with them alike.

The embedded tool models' conversation (``llm/dialogue_format.py``), in the chat template
SmolLM2-135M-Instruct was tuned on (``<|im_start|>role\\ncontent<|im_end|>\\n``, a system
message first):

* the caller's words: a ``user`` message;
* the agent's turn: an ``assistant`` message, its words, then each call it makes as
  :data:`CALL_TOKEN` and the call written as ``llm/tool_text.py`` writes it
  (``FindRestaurants city: San Jose; cuisine: Italian``) — what a reply holds after its first
  call token is never said;
* a call's result: a ``tool`` message, ``llm/tool_text.py``'s one line
  (``10 results: restaurant name: …``);
* where the agent repeats a field of the latest result, it holds the field's slot
  (``[restaurant name]``, ``llm/result_slots.py``), as the embedded tool models do, and the
  runtime fills it from the result as the words are emitted.

Token choices, both from SmolLM2's own vocabulary (no new embedding rows to train or ship):
:data:`CALL_TOKEN` is ``<jupyter_code>`` (id 13: in pretraining it opened code that is run,
what a call is) and :data:`MASK_TOKEN`, the block-diffusion model's mask, is
``<empty_output>`` (id 16); neither appears in the instruction data or in a chat. Turns are
encoded one by one and concatenated (no Jinja template runs), so a conversation's prompt
extends the previous one's ids and its KV cache is reused across turns; control tokens go in
by id, message text is encoded with special-token parsing off.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cadence.llm.dialogue import ToolCall, Turn
from cadence.llm.result_slots import SlotRows, latest_rows, with_slots
from cadence.llm.tool_text import call_text, result_text

IM_START, IM_END, END_OF_TEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
CALL_TOKEN = "<jupyter_code>"
MASK_TOKEN = "<empty_output>"
SMOLLM2_IDS = {END_OF_TEXT: 0, IM_START: 1, IM_END: 2, CALL_TOKEN: 13, MASK_TOKEN: 16}
"""SmolLM2's ids of the control tokens used here (its GGUF's and ``tokenizer.json``'s)."""
SYSTEM_PROMPT = (
    "You are a voice assistant on a phone call. You find and book restaurants, hotels, "
    "flights, buses, rental cars, events and more with your tools. Reply in one or two "
    "short, natural sentences."
)
ROLES = {"user": "user", "agent": "assistant", "tool": "tool"}


@dataclass(frozen=True)
class EncodedTurn:
    """One message's ids, and which of them the agent writes (the loss is taken on those)."""

    ids: list[int]
    written: list[bool]


class ToolChatFormat:
    def __init__(
        self, encode: Callable[[str], list[int]], system_prompt: str = SYSTEM_PROMPT
    ) -> None:
        """``encode``: text to ids, special-token parsing off (the runtime's SmolLM2
        tokenizer, ``cadence.llm.pretrained.tokenizer``)."""
        self.encode = encode
        self.ids = SMOLLM2_IDS
        self.system = self._open("system") + encode(system_prompt) + self._close()
        self.reply_start = self._open("assistant")
        """What a reply's prompt ends with: the reply is generated after it."""

    def _open(self, role: str) -> list[int]:
        return [self.ids[IM_START], *self.encode(f"{role}\n")]

    def _close(self) -> list[int]:
        return [self.ids[IM_END], *self.encode("\n")]

    def encode_turn(
        self, turn: Turn, call: ToolCall | None = None, rows: SlotRows | None = None
    ) -> EncodedTurn:
        """One message: the agent's words and calls (with slots for ``rows``' values) are
        written by it, up to and with ``<|im_end|>``; a result is read knowing the ``call``
        it answers (its arguments are not repeated)."""
        head = self._open(ROLES[turn.speaker])
        body: list[int]
        if turn.speaker == "tool":
            known = _arguments(call.arguments) if call is not None else {}
            body = self.encode(result_text(turn.text, known))
        else:
            agent = turn.speaker == "agent"
            text = with_slots(turn.text, rows.words) if agent and rows else turn.text
            body = self.encode(text)
            for tool_call in turn.tool_calls:
                arguments = {
                    key: with_slots(str(value), rows.calls) if rows else value
                    for key, value in _arguments(tool_call.arguments).items()
                }
                body += [self.ids[CALL_TOKEN], *self.encode(call_text(tool_call.name, arguments))]
        end = self._close()
        written = turn.speaker == "agent"
        ids = head + body + end
        flags = [False] * len(head) + [written] * (len(body) + 1) + [False] * (len(end) - 1)
        return EncodedTurn(ids, flags)

    def encode_turns(self, turns: Sequence[Turn]) -> list[EncodedTurn]:
        """Every turn of one conversation, each tool turn with the call it answers and each
        agent turn with the slots of the latest result before it."""
        calls = {call.id: call for turn in turns for call in turn.tool_calls}
        rows = latest_rows(turns)
        return [
            self.encode_turn(turn, calls.get(turn.tool_call_id or ""), row)
            for turn, row in zip(turns, rows, strict=True)
        ]

    def prompt_ids(self, turns: Sequence[EncodedTurn], max_tokens: int) -> list[int]:
        """The system message, the latest of ``turns`` that fit ``max_tokens`` with it, and
        the start of the reply."""
        kept = list(turns)
        fixed = len(self.system) + len(self.reply_start)
        while kept and fixed + sum(len(t.ids) for t in kept) > max_tokens:
            kept.pop(0)
        return [*self.system, *(i for t in kept for i in t.ids), *self.reply_start]


def _arguments(text: str) -> dict[str, Any]:
    """A call's JSON arguments as a dict (``{}`` for text that is not a JSON object)."""
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
