"""A pretrained language model in the runtime: SmolLM2-135M-Instruct from a pip wheel, read
from its GGUF file into Cadence's own network, held once per process; each call keeps its
conversation in a KV cache of its own. It decides when the caller has finished
(:mod:`~cadence.llm.pretrained.turn_end`); the reply is written by the same base with an
adapter merged in (:mod:`cadence.llm.adapted`). See docs/end-of-turn.md."""

from cadence.llm.pretrained.language_model import (
    LanguageModel,
    ScoredConversation,
    load_language_model,
)
from cadence.llm.pretrained.smollm2 import EMBEDDED, INSTALL, PretrainedModelError, model_file
from cadence.llm.pretrained.turn_end import Calibration, TurnEndModel, TurnEndSession

__all__ = [
    "EMBEDDED",
    "INSTALL",
    "Calibration",
    "LanguageModel",
    "PretrainedModelError",
    "ScoredConversation",
    "TurnEndModel",
    "TurnEndSession",
    "load_language_model",
    "model_file",
]
