"""``create_generator``: the one place where ``models.llm`` (:class:`LLMOptions`) becomes a
turn generator — the embedded block-diffusion model or its autoregressive baseline, an
open-weight checkpoint directory, or an OpenAI-compatible service.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import torch

from cadence.core.clock import Clock
from cadence.llm.adapted import is_adapter
from cadence.llm.adapted_decoding import adapted_generators
from cadence.llm.checkpoint import CheckpointError, load_model
from cadence.llm.generator import (
    AutoregressiveTurnGenerator,
    DecoderTurnGenerator,
    DiffusionTurnGenerator,
    GeneratorOptions,
    TurnGenerator,
)
from cadence.llm.open_weights import open_weights_generators
from cadence.llm.options import LLMOptions

GeneratorFactory = Callable[[Clock | None], TurnGenerator]
"""A new session's generator, on what the configuration named, loaded once."""


def generator_factory(config: LLMOptions) -> GeneratorFactory:
    """What ``config`` names (``models.llm``), loaded once: each call of the result is the
    turn generator of one more session — a local model's own cache over the shared weights,
    or a client of the service. Fails fast with a :class:`CheckpointError` naming the config
    key when its model cannot be had."""
    if config.backend == "openai":
        # Imported here so that the offline default never loads the HTTP client library.
        from cadence.llm.remote import create_openai_generator

        return functools.partial(create_openai_generator, config.openai)
    return local_generator_factory(config)


def create_generator(config: LLMOptions, clock: Clock | None = None) -> TurnGenerator:
    """One generator for ``config``, its model loaded for it alone (``generator_factory``
    shares one between sessions)."""
    return generator_factory(config)(clock)


def local_generator_factory(config: LLMOptions) -> Callable[[Clock | None], DecoderTurnGenerator]:
    """A local model (backends ``dllm`` and ``ar``), its checkpoint loaded once on
    ``config.device``; the checkpoint must fit the backend. A directory is an open-weight
    block-diffusion model (Fast-dLLM v2 or SDAR, told apart by its ``config.json``). The
    weights are only read while decoding, so the sessions' generators share them."""
    if Path(config.checkpoint).expanduser().is_dir():
        return open_weights_generators(config, _device(config.device))
    if is_adapter(config.checkpoint):  # SmolLM2 with a Cadence adapter (llm/adapted.py)
        return adapted_generators(config, _device(config.device))
    loaded = load_model(config.checkpoint)
    loaded.model.to(_device(config.device))
    wanted = "block_causal" if config.backend == "dllm" else "causal"
    if loaded.model.config.attention != wanted:
        raise CheckpointError(
            f"models.llm.checkpoint: {config.checkpoint!r} holds a "
            f"{loaded.model.config.attention} model, backend {config.backend!r} needs {wanted}"
        )
    if loaded.model.config.block_size != config.block_size:
        raise CheckpointError(
            f"models.llm.block_size: {config.block_size} but {config.checkpoint!r} was trained "
            f"with blocks of {loaded.model.config.block_size}"
        )
    options = GeneratorOptions.from_options(config)
    kind = DiffusionTurnGenerator if config.backend == "dllm" else AutoregressiveTurnGenerator
    return functools.partial(kind, loaded, options)


def load_local_generator(config: LLMOptions, clock: Clock | None = None) -> DecoderTurnGenerator:
    """One local model's generator, its checkpoint loaded for it alone."""
    return local_generator_factory(config)(clock)


def _device(name: str) -> torch.device:
    """``models.llm.device`` as a torch device; ``cuda`` without one fails fast, by name."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise CheckpointError(
            "models.llm.device: cuda, but torch sees no CUDA device (this torch is "
            f"{torch.__version__}); set it to cpu or auto"
        )
    return torch.device(name)
