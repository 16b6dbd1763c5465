"""Open-weight block-diffusion checkpoints (Fast-dLLM v2, SDAR) read from a local directory,
with Cadence's own implementation of their networks and decoding: no remote code runs, and
nothing is downloaded. See docs/llm.md, "Open-weight checkpoints"."""

from cadence.llm.open_weights.decoder import OpenWeightsDecoder, OpenWeightsModel
from cadence.llm.open_weights.families import FAMILIES, FAST_DLLM_V2, SDAR, Family
from cadence.llm.open_weights.files import OpenWeightsError
from cadence.llm.open_weights.loader import load_open_weights, open_weights_generators

__all__ = [
    "FAMILIES",
    "FAST_DLLM_V2",
    "SDAR",
    "Family",
    "OpenWeightsDecoder",
    "OpenWeightsError",
    "OpenWeightsModel",
    "load_open_weights",
    "open_weights_generators",
]
