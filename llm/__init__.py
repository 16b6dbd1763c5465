"""Cadence's turn generator: a block-diffusion language model trained on task-oriented
dialogues, decoded block by block with early emission, and an autoregressive baseline with the
same interface.

The pipeline needs only this::

    generator = create_generator(config.models.llm, clock)
    async for piece in generator.stream(history):   # history: Sequence[Turn], user turn last
        ...                                         # piece.text, piece.at_ms

and, while the user is still speaking, ``await generator.prefill(history)``.
"""

from cadence.llm.backends import (
    GeneratorFactory,
    create_generator,
    generator_factory,
    load_local_generator,
)
from cadence.llm.checkpoint import CheckpointError
from cadence.llm.decoding import ReplyStats
from cadence.llm.dialogue import Turn
from cadence.llm.emission import ReplyPiece
from cadence.llm.generator import (
    AutoregressiveTurnGenerator,
    DecoderTurnGenerator,
    DiffusionTurnGenerator,
    GeneratorOptions,
    TurnGenerator,
)
from cadence.llm.options import LLMOptions, OpenAIOptions

__all__ = [
    "AutoregressiveTurnGenerator",
    "CheckpointError",
    "DecoderTurnGenerator",
    "DiffusionTurnGenerator",
    "GeneratorFactory",
    "GeneratorOptions",
    "LLMOptions",
    "OpenAIOptions",
    "ReplyPiece",
    "ReplyStats",
    "Turn",
    "TurnGenerator",
    "create_generator",
    "generator_factory",
    "load_local_generator",
]
