"""``create_generator``: the one place where ``models.llm`` (:class:`LLMOptions`) becomes a
turn generator — the embedded block-diffusion model or its autoregressive baseline, an
open-weight checkpoint directory, or an OpenAI-compatible service.
"""

from __future__ import annotations

from pathlib import Path

import torch

from cadence.core.clock import Clock
from cadence.llm.checkpoint import CheckpointError, load_model
from cadence.llm.generator import (
    AutoregressiveTurnGenerator,
    DecoderTurnGenerator,
    DiffusionTurnGenerator,
    GeneratorOptions,
    TurnGenerator,
)
from cadence.llm.open_weights import open_weights_generator
from cadence.llm.options import LLMOptions


def create_generator(config: LLMOptions, clock: Clock | None = None) -> TurnGenerator:
    """The generator ``config`` names (``models.llm``), ready; fails fast with a
    :class:`CheckpointError` naming the config key when its model cannot be had."""
    if config.backend == "openai":
        # Imported here so that the offline default never loads the HTTP client library.
        from cadence.llm.remote import create_openai_generator

        return create_openai_generator(config.openai, clock)
    return load_local_generator(config, clock)


def load_local_generator(config: LLMOptions, clock: Clock | None = None) -> DecoderTurnGenerator:
    """A local model's generator (backends ``dllm`` and ``ar``), its checkpoint loaded on
    ``config.device``; the checkpoint must fit the backend. A directory is an open-weight
    block-diffusion model (Fast-dLLM v2 or SDAR, told apart by its ``config.json``)."""
    if Path(config.checkpoint).expanduser().is_dir():
        return open_weights_generator(config, _device(config.device), clock)
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
    if config.backend == "dllm":
        return DiffusionTurnGenerator(loaded, options, clock)
    return AutoregressiveTurnGenerator(loaded, options, clock)


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
