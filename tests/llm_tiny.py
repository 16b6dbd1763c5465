"""Tiny models for the turn-generator tests: a tokenizer trained on a handful of dialogues and
randomly initialised transformers small enough that a forward takes microseconds."""

from __future__ import annotations

from functools import cache

import torch

from cadence.llm.dialogue import Turn
from cadence.llm.dialogue_format import DialogueFormat
from cadence.llm.model import AttentionMode, ModelConfig, Transformer
from cadence.llm.tokenizer import DialogueTokenizer
from cadence.tooling.training.corpus import Dialogue

DIALOGUES = (
    Dialogue(
        "d1",
        (
            Turn("user", "I would like to book a table for two in San Jose."),
            Turn("agent", "Sure, what time would you like the table?"),
            Turn("user", "At seven in the evening, please."),
            Turn("agent", "Your table for two is booked at 7 pm."),
        ),
    ),
    Dialogue(
        "d2",
        (
            Turn("user", "Can you find me a flight to Chicago tomorrow?"),
            Turn("agent", "I found a flight leaving at 9 am for $120."),
            Turn("user", "That works, thank you."),
            Turn("agent", "You're welcome. Anything else?"),
        ),
    ),
)


@cache
def tokenizer() -> DialogueTokenizer:
    texts = [turn.text for d in DIALOGUES for turn in d.turns]
    return DialogueTokenizer.train(texts * 3, vocab_size=400)


def dialogue_format(block_size: int = 4) -> DialogueFormat:
    return DialogueFormat(tokenizer(), block_size, max_turn_tokens=4 * block_size)


def model(attention: AttentionMode, block_size: int = 4, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    config = ModelConfig(
        vocab_size=tokenizer().vocab_size,
        attention=attention,
        block_size=block_size,
        d_model=32,
        n_layers=2,
        n_heads=2,
        ffn_hidden=64,
        max_positions=512,
    )
    return Transformer(config).eval()
