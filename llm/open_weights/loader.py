"""Loads an open-weight model directory into a turn generator.

The family is detected from ``config.json`` (``architectures`` and ``model_type``), its facts
are confirmed against every file, and the weights are loaded name for name into Cadence's own
network: bfloat16 on CUDA (the checkpoints' own precision, half the memory of float32) and
float32 on CPU (where bfloat16 matmuls are slow and lose precision).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from tokenizers import Tokenizer

from cadence.core.clock import Clock, MonotonicClock
from cadence.llm.checkpoint import CheckpointError
from cadence.llm.generator import DecoderTurnGenerator, GeneratorOptions
from cadence.llm.open_weights import checks
from cadence.llm.open_weights.chat import ChatFormat, ChatTokenizer
from cadence.llm.open_weights.decoder import OpenWeightsDecoder, OpenWeightsModel
from cadence.llm.open_weights.families import Family, detect_family
from cadence.llm.open_weights.files import (
    CONFIG,
    TOKENIZER,
    TOKENIZER_CONFIG,
    WEIGHTS,
    WEIGHTS_INDEX,
    ModelDirectory,
    OpenWeightsError,
)
from cadence.llm.open_weights.graphed import GraphedOpenWeightsDecoder
from cadence.llm.open_weights.network import QwenForCausalLM
from cadence.llm.open_weights.shape import QwenShape
from cadence.llm.options import LLMOptions


def open_weights_generators(
    config: LLMOptions, device: torch.device
) -> Callable[[Clock | None], DecoderTurnGenerator]:
    """The model directory ``models.llm.checkpoint``, loaded once; each call of the result is
    a block-diffusion generator of its own (its cache) over those weights."""
    if config.backend != "dllm":
        raise CheckpointError(
            f"models.llm.backend: {config.backend!r}, but {config.checkpoint!r} is an "
            "open-weight block-diffusion model: set backend: dllm"
        )
    model = load_open_weights(Path(config.checkpoint).expanduser(), device, config.block_size)
    options = GeneratorOptions.from_options(config)

    def generator(clock: Clock | None) -> DecoderTurnGenerator:
        # On CUDA every forward is a fixed-shape step replayed as a graph; elsewhere eager.
        kind = GraphedOpenWeightsDecoder if device.type == "cuda" else OpenWeightsDecoder
        decoder = kind(model, options.decoding, clock or MonotonicClock())
        return DecoderTurnGenerator(decoder, model.chat, options)

    return generator


def load_open_weights(root: Path, device: torch.device, block_size: int) -> OpenWeightsModel:
    """The model in directory ``root`` on ``device``, decoding blocks of ``block_size``."""
    directory = ModelDirectory(root)
    config = directory.json(CONFIG)
    family = detect_family(config, root)
    checks.confirm_config(config, family, root)
    size = checks.block_size(config, family, root, block_size)
    tokenizer = _tokenizer(directory.file(TOKENIZER))
    checks.confirm_tokenizer(tokenizer, family, root)
    checks.confirm_tokenizer_config(directory.json(TOKENIZER_CONFIG), family, root)
    shape = QwenShape.from_config(config, family, root)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    network = _network(directory, shape, family, dtype, device)
    return OpenWeightsModel(network, ChatFormat(ChatTokenizer(tokenizer)), family, size)


def _tokenizer(path: Path) -> Tokenizer:
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:
        raise OpenWeightsError(path, f"unreadable: {exc}") from exc


def _network(
    directory: ModelDirectory,
    shape: QwenShape,
    family: Family,
    dtype: torch.dtype,
    device: torch.device,
) -> QwenForCausalLM:
    """The network with the stored weights, every tensor matched by name and shape."""
    with torch.device("meta"):  # shapes only: the stored tensors become the parameters
        network = QwenForCausalLM(shape)
    wanted = network.state_dict()
    stored = directory.weights(dtype, device)
    tensors = dict(stored.tensors)
    if shape.tie_word_embeddings:  # a tied head may be stored as well; the embedding serves
        tensors.pop("lm_head.weight", None)
    missing = sorted(set(wanted) - set(tensors))
    if missing:
        listing = WEIGHTS_INDEX if (directory.root / WEIGHTS_INDEX).is_file() else WEIGHTS
        raise OpenWeightsError(
            directory.root / listing,
            f"lacks {len(missing)} tensor(s) of the {family.base} decoder that config.json "
            f"describes ({family.name}), e.g. {missing[0]}",
        )
    for name, tensor in tensors.items():
        if name not in wanted:
            raise OpenWeightsError(
                stored.sources[name],
                f"holds {name}, which the {family.base} decoder of {family.name} does not have",
            )
        if tensor.shape != wanted[name].shape:
            raise OpenWeightsError(
                stored.sources[name],
                f"{name} is {list(tensor.shape)}; config.json makes it {list(wanted[name].shape)}",
            )
    network.load_state_dict(tensors, strict=True, assign=True)
    return network.eval()
