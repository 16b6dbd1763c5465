"""How dialogues become token sequences, for training and for decoding alike.

Each turn is ``<speaker> text <eot>`` padded with ``<pad>`` to a whole number of blocks, so
every turn starts on a block boundary: a prompt is then prefilled in whole blocks, a reply's
blocks never straddle the context, and a finished turn's KV cache is exact whatever follows.
A reply starts with the given ``<agent>`` token in the first position of its first block.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from cadence.llm.dialogue import Turn, spoken_turns
from cadence.llm.tokenizer import DialogueTokenizer


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

    def encode_turn(self, turn: Turn) -> list[int]:
        """``<speaker> text <eot> <pad>…``; text beyond ``max_turn_tokens`` is cut."""
        special = self.tokenizer.special
        speaker = special.agent if turn.speaker == "agent" else special.user
        text = self.tokenizer.encode(turn.text)[: self.max_turn_tokens - 2]
        ids = [speaker, *text, special.end_of_turn]
        return ids + [special.pad] * (-len(ids) % self.block_size)

    def prompt(
        self, history: Sequence[Turn], history_turns: int, max_context_tokens: int
    ) -> list[int]:
        """Context for the next agent reply: the last ``history_turns`` turns, dropping the
        oldest until they fit ``max_context_tokens``, then ``<agent>`` to start the reply.
        The reply therefore starts at ``len(prompt) - 1``, a block boundary. The model knows
        no tools: it reads only what was said (``spoken_turns``)."""
        encoded = [self.encode_turn(turn) for turn in spoken_turns(history)[-history_turns:]]
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
