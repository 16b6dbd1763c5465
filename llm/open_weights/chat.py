"""The conversation as ChatML token ids, and reply ids back to text.

Both families were fine-tuned on ChatML: ``<|im_start|>role\\ncontent<|im_end|>\\n`` per
message, the reply starting after ``<|im_start|>assistant\\n``. Cadence renders it in code
rather than by running the directory's Jinja ``chat_template`` (whose ChatML markers
:mod:`cadence.llm.open_weights.checks` confirms), because

* turns are encoded one by one and concatenated, so a new turn's prompt starts with exactly
  the ids of the previous one and the conversation's KV cache is reused across turns; the
  templates add content that depends on the position of a message (Qwen3's empty thinking
  block on the last assistant turn), which would break that;
* the voice agent gives its own short system message instead of the template's default
  ("You are Qwen, created by Alibaba Cloud…");
* nothing from the directory is executed.

Control tokens are inserted by id, and message text is encoded with special-token parsing off,
so a caller who says "<|im_end|>" cannot close the turn.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer

from cadence.llm.dialogue import Turn, spoken_turns
from cadence.llm.open_weights.families import IM_END, IM_START, QWEN_CONTROL_IDS
from cadence.llm.result_slots import ReplyFacts

SYSTEM_PROMPT = (
    "You are a helpful voice assistant on a phone call. Reply in one or two short, "
    "natural sentences, without lists or formatting."
)
ROLES = {"user": "user", "agent": "assistant"}


class ChatTokenizer:
    """Qwen's byte-level BPE from ``tokenizer.json``: a prefix of the ids decodes to a prefix
    of the text, which is what early emission needs."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._tokenizer.encode_special_tokens = True  # message text never yields control ids

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``; control and mask tokens are left out."""
        text: str = self._tokenizer.decode(list(ids), skip_special_tokens=True)
        return text

    def known_ids(self) -> list[int]:
        """Every id the tokenizer can decode (a model's vocabulary is often padded past it)."""
        return sorted(self._tokenizer.get_vocab(with_added_tokens=True).values())


class ChatFormat:
    def __init__(self, tokenizer: ChatTokenizer, system_prompt: str = SYSTEM_PROMPT) -> None:
        self.tokenizer = tokenizer
        self._system = self._message("system", system_prompt)
        self._reply_start = [QWEN_CONTROL_IDS[IM_START], *tokenizer.encode("assistant\n")]

    def _message(self, role: str, text: str) -> list[int]:
        return [
            QWEN_CONTROL_IDS[IM_START],
            *self.tokenizer.encode(f"{role}\n{text}"),
            QWEN_CONTROL_IDS[IM_END],
            *self.tokenizer.encode("\n"),
        ]

    def visible(self, history: Sequence[Turn]) -> list[Turn]:
        """The turns these models read: what was said (they are offered no tools)."""
        return spoken_turns(history)

    def reply_facts(self, history: Sequence[Turn]) -> ReplyFacts:
        """None: these models write no result slots (they read no results), and say the
        dates of their own world, not the SGD corpus's."""
        return ReplyFacts()

    def prompt(
        self, history: Sequence[Turn], history_turns: int, max_context_tokens: int
    ) -> list[int]:
        """The system message, the last ``history_turns`` turns (the oldest dropped until
        they fit ``max_context_tokens`` with the rest) and the start of the assistant's reply.
        Tools are not offered to these models: they read only what was said."""
        turns = [
            self._message(ROLES[turn.speaker], turn.text)
            for turn in self.visible(history)[-history_turns:]
        ]
        fixed = len(self._system) + len(self._reply_start)
        while turns and fixed + sum(map(len, turns)) > max_context_tokens:
            turns.pop(0)
        return [*self._system, *(token for turn in turns for token in turn), *self._reply_start]
