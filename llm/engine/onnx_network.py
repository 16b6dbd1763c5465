"""``OnnxNetwork``: the int8 graph (``graph.py``) behind the PyTorch network's call, so the
decoders and the end of turn run on either without a change.

The call is :meth:`cadence.llm.open_weights.network.QwenForCausalLM.forward`'s: ids and
positions, who may attend to whom as a boolean mask (made the graph's additive bias here), the
conversation's cache extended by the first ``keep`` positions, the logits of the ``last``
positions. The cache is an :class:`OnnxKVCache` of numpy arrays, one pair per layer, that
:meth:`OnnxNetwork.new_cache` gives each conversation; the session itself — the weights and
onnxruntime's plan — is loaded once per process and graph and shared by every call (its
``run`` may be called from several threads at once).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import onnxruntime
import torch

from cadence.llm.engine.graph import NEVER, input_names, output_names
from cadence.llm.kv_cache import KeyValueStore

_THREADS = [1]


def set_engine_threads(threads: int) -> None:
    """onnxruntime's intra-op threads for the graphs loaded from now on
    (``threads.llm``; set before the models load, as torch's are)."""
    _THREADS[0] = max(1, threads)


@dataclass(frozen=True)
class GraphShape:
    """What running a graph needs of the network's shape (named as in ``GraphShape``), read off
    the graph's inputs and outputs."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int

    @classmethod
    def of(cls, session: onnxruntime.InferenceSession) -> GraphShape:
        past = [i for i in session.get_inputs() if i.name.startswith("past_k_")]
        _, kv_heads, _, head_dim = past[0].shape
        vocab = session.get_outputs()[0].shape[2]
        return cls(len(past), int(kv_heads), int(head_dim), int(vocab))


class OnnxKVCache:
    """One conversation's keys and values: ``[1, kv_heads, length, head_dim]`` per layer, as
    numpy arrays (the graph's presents are kept as they come, without a copy). A
    ``ConversationStore`` like :class:`cadence.llm.kv_cache.KVCache`, so the conversation
    caches of every decoder hold it as they hold that one."""

    def __init__(self, shape: GraphShape) -> None:
        empty = np.zeros((1, shape.num_kv_heads, 0, shape.head_dim), dtype=np.float32)
        self.layers: list[tuple[np.ndarray, np.ndarray]] = [(empty, empty)] * shape.num_layers

    @property
    def length(self) -> int:
        return int(self.layers[0][0].shape[2])

    def truncate(self, length: int) -> None:
        """Forget every position from ``length`` on."""
        if length < self.length:
            self.layers = [(k[:, :, :length], v[:, :, :length]) for k, v in self.layers]

    def cached(self, layer: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        keys, values = self.layers[layer]
        return (torch.from_numpy(keys), torch.from_numpy(values)) if keys.shape[2] else None

    def extend(
        self, layer: int, keys: torch.Tensor, values: torch.Tensor, keep: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """What :meth:`cadence.llm.kv_cache.KVCache.extend` does, for a PyTorch network
        handed this cache (the graph extends it in :meth:`OnnxNetwork.__call__`)."""
        past_k, past_v = (torch.from_numpy(array) for array in self.layers[layer])
        keys, values = torch.cat((past_k, keys.float()), 2), torch.cat((past_v, values.float()), 2)
        kept = past_k.shape[2] + keep
        self.layers[layer] = (keys[:, :, :kept].numpy(), values[:, :, :kept].numpy())
        return keys, values


class OnnxNetwork:
    def __init__(self, session: onnxruntime.InferenceSession, shape: GraphShape) -> None:
        self.session = session
        self.shape = shape
        self._outputs = output_names(shape.num_layers)
        self._past = input_names(shape.num_layers)[4:]

    @classmethod
    def load(cls, path: Path) -> OnnxNetwork:
        """The graph ``path``, loaded once per process (and thread count)."""
        with _LOCK:
            return _load(path.resolve(), _THREADS[0])

    def new_cache(self) -> OnnxKVCache:
        return OnnxKVCache(self.shape)

    def __call__(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        allowed: torch.Tensor | None,
        cache: KeyValueStore | None = None,
        keep: int | None = None,
        last: int | None = None,
    ) -> torch.Tensor:
        """Logits ``[1, last or tokens, vocab]`` (float32); see the module. ``cache`` must be
        one of :meth:`new_cache`'s."""
        if cache is not None and not isinstance(cache, OnnxKVCache):
            raise TypeError(f"the int8 graph keeps its keys in an OnnxKVCache, not {cache!r}")
        tokens = ids.shape[1]
        store = cache or self.new_cache()
        cached = store.length
        if allowed is None:
            bias = np.zeros((1, 1, tokens, cached + tokens), dtype=np.float32)
        else:
            mask = allowed.cpu().numpy()
            bias = np.where(mask, np.float32(0), np.float32(NEVER)).astype(np.float32)
            bias = np.broadcast_to(bias, (1, 1, tokens, cached + tokens))
        wanted = tokens if last is None else last
        feeds: dict[str, np.ndarray] = {
            "ids": ids.cpu().numpy().astype(np.int64),
            "positions": positions.cpu().numpy().astype(np.int64),
            "bias": np.ascontiguousarray(bias),
            "rows": np.arange(tokens - wanted, tokens, dtype=np.int64),
        }
        for index, (k, v) in enumerate(store.layers):
            feeds[self._past[2 * index]] = np.ascontiguousarray(k)
            feeds[self._past[2 * index + 1]] = np.ascontiguousarray(v)
        logits, *present = self.session.run(self._outputs, feeds)
        if cache is not None:
            kept = cached + (tokens if keep is None else keep)
            cache.layers = [
                (k[:, :, :kept], v[:, :, :kept])
                for k, v in zip(present[0::2], present[1::2], strict=True)
            ]
        return torch.from_numpy(logits)


_LOCK = threading.Lock()


@cache
def _load(path: Path, threads: int) -> OnnxNetwork:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return OnnxNetwork(session, GraphShape.of(session))
