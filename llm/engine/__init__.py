"""The pretrained network on onnxruntime: the project's SmolLM2 network exported to ONNX once,
quantized to int8, cached outside the repository, and run with the same call as the PyTorch
network (``graph.py`` builds, ``store.py`` keeps, ``onnx_network.py`` runs)."""

from cadence.llm.engine.onnx_network import OnnxKVCache, OnnxNetwork, set_engine_threads
from cadence.llm.engine.store import EngineError, engine_dir, int8_network

__all__ = [
    "EngineError",
    "OnnxKVCache",
    "OnnxNetwork",
    "engine_dir",
    "int8_network",
    "set_engine_threads",
]
