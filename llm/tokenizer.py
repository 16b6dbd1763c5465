"""Byte-level BPE tokenizer with the special tokens of the dialogue format.

Byte-level BPE never meets an unknown character (any text is bytes), and decoding a token
sequence is the concatenation of its tokens' bytes, so the text of a prefix is a prefix of the
text: that is what lets the decoder stream words before the reply is finished.
The tokenizer is stored inside every checkpoint as its JSON, so a model never meets a
tokenizer it was not trained with.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

PAD = "<pad>"
MASK = "<mask>"
END_OF_TURN = "<eot>"
USER = "<user>"
AGENT = "<agent>"
SPECIAL_TOKENS = (PAD, MASK, END_OF_TURN, USER, AGENT)
"""Fixed ids 0..4 in this order."""
CALL = "<call>"
"""Starts a tool call inside an agent turn (``llm/tool_text.py`` says how it is written)."""
RESULT = "<result>"
"""Starts a turn holding a tool's result."""
TOOL_TOKENS = (CALL, RESULT)
"""Added after the vocabulary (``with_tool_tokens``) to a tokenizer trained without them."""


@dataclass(frozen=True)
class SpecialIds:
    pad: int
    mask: int
    end_of_turn: int
    user: int
    agent: int
    call: int | None = None
    """``None``: the tokenizer (and so its model) knows no tools."""
    result: int | None = None


class DialogueTokenizer:
    """Wraps a HF ``tokenizers.Tokenizer``; text is encoded with a leading space, the way a
    word inside a sentence is, so every word of a turn is tokenized alike."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        ids = [tokenizer.token_to_id(token) for token in SPECIAL_TOKENS]
        if None in ids:
            raise ValueError(f"tokenizer lacks special tokens {SPECIAL_TOKENS}")
        tools = [tokenizer.token_to_id(token) for token in TOOL_TOKENS]
        self.special = SpecialIds(*(int(i) for i in ids if i is not None), *tools)

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 4096) -> DialogueTokenizer:
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(SPECIAL_TOKENS),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tokenizer.train_from_iterator(texts, trainer=trainer)
        return cls(tokenizer)

    @property
    def knows_tools(self) -> bool:
        return self.special.call is not None and self.special.result is not None

    def with_tool_tokens(self) -> DialogueTokenizer:
        """This tokenizer with ``<call>`` and ``<result>`` after its vocabulary (every other
        id unchanged, so a model trained with it only grows two embedding rows)."""
        if self.knows_tools:
            return self
        grown = Tokenizer.from_str(self._tokenizer.to_str())
        grown.add_special_tokens(list(TOOL_TOKENS))
        return DialogueTokenizer(grown)

    @classmethod
    def from_json(cls, text: str) -> DialogueTokenizer:
        return cls(Tokenizer.from_str(text))

    def to_json(self) -> str:
        return self._tokenizer.to_str()

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` with the leading space of the first word removed."""
        text: str = self._tokenizer.decode(list(ids), skip_special_tokens=True)
        return text.removeprefix(" ")
