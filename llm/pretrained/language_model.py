"""``LanguageModel``: the pretrained model, loaded once per process and shared by every call.

A call never owns the weights, only a :class:`ScoredConversation` — its conversation's token ids
and their keys and values — so a server with many calls holds one copy of the 135M parameters
(the int8 graph on onnxruntime on a CPU, ``llm/engine/``; or the PyTorch network) and a few MB
of cache per call.

The conversation is ChatML, as SmolLM2-Instruct was tuned: ``<|im_start|>role\\n…<|im_end|>\\n``
per message, rendered here from ids so that each message's ids are the same whatever follows
it — the property that lets a cache be extended turn after turn instead of recomputed.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch
from tokenizers import Tokenizer

from cadence.llm.conversation_cache import ConversationCache
from cadence.llm.engine import EngineError, OnnxNetwork, int8_network
from cadence.llm.open_weights.network import QwenForCausalLM
from cadence.llm.open_weights.shape import QwenShape
from cadence.llm.pretrained.cpu_linear import pack_for_cpu
from cadence.llm.pretrained.gguf_weights import read_gguf
from cadence.llm.pretrained.smollm2 import PretrainedModelError

CONFIG_KEY = "models.lm.model"

IM_START, IM_END, END_OF_TEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"


@dataclass(frozen=True)
class ChatIds:
    im_start: int
    im_end: int
    end_of_text: int
    newline: list[int]


class LanguageModel:
    """The network (PyTorch, or its int8 graph: the same call), its tokenizer and ChatML's
    control tokens."""

    def __init__(
        self, network: QwenForCausalLM | OnnxNetwork, tokenizer: Tokenizer, name: str
    ) -> None:
        self.network = network
        self.name = name
        self.tokenizer = tokenizer
        im_start, im_end = (tokenizer.token_to_id(token) for token in (IM_START, IM_END))
        if im_start is None or im_end is None:
            raise PretrainedModelError(f"{name} has no {IM_START} or {IM_END}: not ChatML")
        end_of_text = tokenizer.token_to_id(END_OF_TEXT)
        self.chat = ChatIds(
            im_start=im_start,
            im_end=im_end,
            end_of_text=im_end if end_of_text is None else end_of_text,
            newline=self.encode("\n"),
        )

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` as words: control tokens written in it are not control tokens."""
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def message(self, role: str, text: str) -> list[int]:
        """One whole ChatML message."""
        return [*self.open_message(role, text), self.chat.im_end, *self.chat.newline]

    def open_message(self, role: str, text: str = "") -> list[int]:
        """A message still being written: its start and ``text`` so far."""
        return [self.chat.im_start, *self.encode(f"{role}\n{text}")]

    def new_conversation(self) -> ScoredConversation:
        return ScoredConversation(self)


class ScoredConversation:
    """A conversation kept in the model's cache, scored as it grows.

    The ids and their keys and values are a :class:`~cadence.llm.conversation_cache.
    ConversationCache` — the one cache type every decoder keeps — with single-token blocks:
    :meth:`log_probs` and :meth:`extend` take the ids of the whole conversation so far; what
    they share with the cache (up to the first id that differs) is reused, the rest is
    computed — a partial transcript that grew by a word costs that word. Not thread-safe: one
    call's work at a time (its owner serialises it; different calls run in parallel over the
    shared weights).
    """

    def __init__(self, model: LanguageModel) -> None:
        self.model = model
        self.cache = ConversationCache(model.network.new_cache(), block_size=1)
        self._last: tuple[list[int], list[int], torch.Tensor] | None = None
        """The ids, the branches and the log-probabilities of the last score."""
        self.tokens_computed = 0
        """Positions run through the network since creation: what the cache saved shows here."""

    @property
    def ids(self) -> list[int]:
        """Token ids whose keys and values are cached."""
        return self.cache.ids

    def log_probs(self, ids: Sequence[int], branches: Sequence[int] = ()) -> torch.Tensor:
        """log P(next token), float32 ``[1 + len(branches), vocab]``: row 0 after ``ids``, row
        *i* after ``ids`` and then ``branches[i - 1]`` — alternative next tokens computed in
        the same pass (each sees ``ids`` and itself, at the same position, and is not kept).
        ``ids`` becomes the cache."""
        ids, branches = list(ids), list(branches)
        if not ids:
            raise ValueError("a conversation needs at least one token")
        if self._last is not None and self._last[:2] == (ids, branches) and ids == self.ids:
            return self._last[2]
        self.cache.reuse(ids[:-1])  # the last token runs again at least: its logits are wanted
        logits = self._run(ids, branches, last=1 + len(branches))
        out = torch.log_softmax(logits[0].float(), dim=-1)
        self._last = (ids, branches, out)
        return out

    def extend(self, ids: Sequence[int]) -> None:
        """Hold ``ids`` in the cache, computing no logits: the layers only, for the words the
        cache lacks (the output head, a fifth of a pass's work, is left to the pass that
        needs a score)."""
        ids = list(ids)
        self.cache.reuse(ids)
        if len(ids) > len(self.cache.ids):
            self._run(ids, [], last=0)

    def _run(self, ids: list[int], branches: list[int], last: int) -> torch.Tensor:
        """The network over what ``ids`` adds to the cache (and ``branches``); ``ids`` is then
        what is cached."""
        keep = len(self.cache.ids)
        new = ids[keep:]
        positions = [*range(keep, len(ids)), *([len(ids)] * len(branches))]
        with torch.inference_mode():
            logits: torch.Tensor = self.model.network(
                torch.tensor([[*new, *branches]]),
                torch.tensor([positions]),
                _visibility(keep, len(new), len(branches)),
                self.cache.kv,
                keep=len(new),
                last=last,
            )
        self.cache.ids += new
        self.tokens_computed += len(new)
        return logits


def _visibility(cached: int, new: int, branches: int) -> torch.Tensor:
    """``[1, 1, new + branches, cached + new + branches]``: each new position sees the cache
    and the new positions up to itself; each branch sees the cache, every new position and
    itself."""
    width = cached + new + branches
    allowed = torch.zeros(new + branches, width, dtype=torch.bool)
    allowed[:, :cached] = True
    allowed[:new, cached : cached + new] = torch.ones(new, new, dtype=torch.bool).tril()
    allowed[new:, cached : cached + new] = True
    allowed[new:, cached + new :] = torch.eye(branches, dtype=torch.bool)
    return allowed[None, None]


_LOAD_LOCK = threading.Lock()


def load_language_model(path: Path, precision: str = "auto") -> LanguageModel:
    """The model in GGUF file ``path``, loaded once per process for each precision: ``int8``
    (its int8 graph on onnxruntime, built once into the cache folder: ``llm/engine/``),
    ``bf16`` (packed for oneDNN: cpu_linear.py), ``fp32`` (the file's values exactly) or
    ``auto`` (``int8``: the scorer runs on the CPU)."""
    if precision not in ("auto", "int8", "bf16", "fp32"):
        raise ValueError(f"precision {precision!r}: auto, int8, bf16 or fp32")
    if precision == "auto":
        precision = "int8"
    with _LOAD_LOCK:
        return _load(path.resolve(), precision)


@cache
def _load(path: Path, precision: str) -> LanguageModel:
    if precision == "int8":
        head = read_gguf(path, tensors=False)
        try:
            graph = int8_network("smollm2", (path,), lambda: pytorch_network(path), CONFIG_KEY)
        except EngineError as exc:
            raise PretrainedModelError(str(exc)) from exc
        return LanguageModel(graph, head.tokenizer, head.name)
    model = read_gguf(path)
    network = _network(model.shape, model.tensors)
    del model
    if precision == "bf16":
        tied = network.lm_head is None
        pack_for_cpu(
            network,
            network.get_parameter("model.embed_tokens.weight" if tied else "lm_head.weight"),
        )
    _return_freed_memory()
    head = read_gguf(path, tensors=False)
    return LanguageModel(network, head.tokenizer, head.name)


def pytorch_network(path: Path) -> QwenForCausalLM:
    """The float32 network of GGUF file ``path`` (what its int8 graph is exported from)."""
    model = read_gguf(path)
    return _network(model.shape, model.tensors)


def _network(shape: QwenShape, tensors: dict[str, torch.Tensor]) -> QwenForCausalLM:
    with torch.device("meta"):  # shapes only: the file's tensors become the parameters
        network = QwenForCausalLM(shape)
    network.load_state_dict(tensors, strict=True, assign=True)
    return network.eval().requires_grad_(False)


def _return_freed_memory() -> None:
    """Hand the loading's float32 copies back to the system. They are freed, but glibc keeps
    freed heap pages for reuse, so the process would go on holding ~650 MB it never touches
    again (measured: 990 MB resident after a load, 340 MB after this)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: nothing to do, or nothing that can be done
        return
    libc.malloc_trim(0)
