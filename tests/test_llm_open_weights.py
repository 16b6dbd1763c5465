"""Open-weight checkpoints (Fast-dLLM v2, SDAR) from a local directory, on tiny random-weight
models built here with transformers: nothing is downloaded."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import jinja2
import pytest
import torch
from tokenizers import Tokenizer

from cadence import kernels
from cadence.core.clock import VirtualClock
from cadence.llm import DecoderTurnGenerator, Turn, create_generator
from cadence.llm.attention_masks import step_mask
from cadence.llm.checkpoint import CheckpointError
from cadence.llm.decoding import DecodingOptions, ReplyStats
from cadence.llm.open_weights import (
    FAST_DLLM_V2,
    SDAR,
    Family,
    OpenWeightsDecoder,
    load_open_weights,
)
from cadence.llm.open_weights import graphed as graphed_module
from cadence.llm.open_weights.chat import SYSTEM_PROMPT, ChatFormat, ChatTokenizer
from cadence.llm.open_weights.decoder import OpenWeightsModel
from cadence.llm.open_weights.families import QWEN_CONTROL_IDS
from cadence.llm.open_weights.graphed import GraphedOpenWeightsDecoder
from cadence.llm.open_weights.network import QwenForCausalLM
from cadence.llm.open_weights.shape import QwenShape
from cadence.llm.options import LLMOptions
from cadence.tooling.bench import tiny_open_weights as tiny

NAMES = list(tiny.SPECS)
HISTORY = [
    Turn("user", "Hello, I would like to book a table for two tonight."),
    Turn("agent", "Sure, what time would you like the table?"),
    Turn("user", "At seven in the evening, please."),
]
CPU = torch.device("cpu")


@dataclass(frozen=True)
class Tiny:
    directory: Path
    block_size: int

    def config(self, **changes: object) -> LLMOptions:
        settings: dict[str, object] = {
            "backend": "dllm",
            "checkpoint": str(self.directory),
            "block_size": self.block_size,
            "confidence_threshold": 0.9,
            "max_reply_tokens": 24,
            "max_context_tokens": 512,
        }
        return LLMOptions.model_validate(settings | changes)


def _generator(config: LLMOptions) -> DecoderTurnGenerator:
    """``create_generator``'s choice for ``config``, which must be a local model's, on a
    clock that stands still (on the wall clock a slow step could run past the deadline)."""
    generator = create_generator(config, VirtualClock())
    assert isinstance(generator, DecoderTurnGenerator)
    return generator


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Tiny]:
    """Both tiny models, built in a subprocess (:mod:`cadence.tooling.bench.tiny_open_weights` says
    why)."""
    root = tmp_path_factory.mktemp("open_weights")
    built = subprocess.run(
        [sys.executable, "-m", "cadence.tooling.bench.tiny_open_weights", str(root)],
        cwd=Path(__file__).parents[1],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    return {name: Tiny(root / name, spec.block_size) for name, spec in tiny.SPECS.items()}


# --- the network -------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_logits_match_transformers_in_causal_mode(models: dict[str, Tiny], name: str) -> None:
    model = models[name]
    network = load_open_weights(model.directory, CPU, model.block_size).network
    ids = tiny.reference_ids()
    positions = torch.arange(ids.shape[1]).expand(ids.shape[0], -1)
    with torch.inference_mode():
        ours = network(ids, positions, step_mask(0, ids.shape[1], "causal", model.block_size))
    theirs = torch.load(model.directory / tiny.REFERENCE_LOGITS, weights_only=True)
    assert (ours - theirs).abs().max().item() <= 1e-4
    assert next(network.parameters()).dtype == torch.float32  # CPU: float32
    # Fast-dLLM v2 (1.5B) ties its output head to the embedding and comes as one file; the
    # SDAR tiny model has its own head and comes in shards with an index.
    sharded = (model.directory / "model.safetensors.index.json").is_file()
    assert sharded == (name == "sdar") == (network.lm_head is not None)
    assert len(list(model.directory.glob("model-*.safetensors"))) == (3 if sharded else 0)


def _plain_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: object
) -> torch.Tensor:
    assert isinstance(allowed, torch.Tensor)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v


@pytest.mark.parametrize("name", NAMES)
def test_block_causal_decoding_matches_a_dense_mask_through_plain_attention(
    models: dict[str, Tiny], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    size = models[name].block_size
    network = load_open_weights(models[name].directory, CPU, size).network
    length = 2 * size + size // 2  # two whole blocks, then half of one
    ids = torch.randint(0, 300, (1, length), generator=torch.Generator().manual_seed(2))
    positions = torch.arange(length)[None]
    dense = torch.tensor([[j // size <= i // size for j in range(length)] for i in range(length)])
    with torch.inference_mode():
        # The way the decoder runs: whole blocks prefilled into the cache, then a block over it.
        cache, whole = network.new_cache(), 2 * size
        whole_mask = step_mask(0, whole, "block_causal", size)
        prefill = network(ids[:, :whole], positions[:, :whole], whole_mask, cache)
        rest_mask = step_mask(whole, length - whole, "block_causal", size)
        block = network(ids[:, whole:], positions[:, whole:], rest_mask, cache)
        with monkeypatch.context() as patch:
            patch.setattr(kernels, "attention", _plain_attention)
            reference = network(ids, positions, dense[None, None])
            changed = ids.clone()
            changed[0, -1] = (changed[0, -1] + 1) % 300  # the last token of the last block
            after_change = network(changed, positions, dense[None, None])
    assert (torch.cat((prefill, block), dim=1) - reference).abs().max().item() <= 1e-4
    # Causal across blocks, bidirectional inside one: the change reaches the first position
    # of its own block and nothing before it.
    assert torch.equal(after_change[:, : 2 * size], reference[:, : 2 * size])
    assert not torch.allclose(after_change[:, 2 * size], reference[:, 2 * size])


# --- the chat format ---------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_the_prompt_is_the_directory_chat_template_rendered(
    models: dict[str, Tiny], name: str
) -> None:
    directory = models[name].directory
    chat = load_open_weights(directory, CPU, models[name].block_size).chat
    roles = {"user": "user", "agent": "assistant"}
    messages = [{"role": "system", "content": SYSTEM_PROMPT}] + [
        {"role": roles[turn.speaker], "content": turn.text} for turn in HISTORY
    ]
    rendered = jinja2.Template(tiny.CHAT_TEMPLATE).render(
        messages=messages, add_generation_prompt=True
    )
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    expected = tokenizer.encode(rendered, add_special_tokens=False).ids
    assert chat.prompt(HISTORY, history_turns=3, max_context_tokens=512) == expected
    # Too long: the oldest turns go first; the system message and the reply's start stay.
    fits = chat.prompt(HISTORY, history_turns=3, max_context_tokens=len(expected) - 1)
    assert fits == chat.prompt(HISTORY[1:], history_turns=3, max_context_tokens=512)


# --- decoding through the generator ------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
async def test_a_reply_streams_through_the_generator_at_word_boundaries(
    models: dict[str, Tiny], name: str
) -> None:
    generator = _generator(models[name].config())
    pieces = [piece async for piece in generator.stream(HISTORY)]
    stats = generator.last_stats
    assert isinstance(generator.decoder, OpenWeightsDecoder)
    assert len(pieces) > 1
    assert "".join(piece.text for piece in pieces) == stats.text
    assert all(piece.text.startswith(" ") for piece in pieces[1:])  # cut before a space
    assert [p.at_ms for p in pieces] == sorted(p.at_ms for p in pieces)
    assert 0 < len(stats.token_ids) <= 24
    assert not set(stats.token_ids) & set(QWEN_CONTROL_IDS.values())


@pytest.mark.parametrize("name", NAMES)
async def test_prefill_while_the_user_speaks_saves_work_and_changes_nothing(
    models: dict[str, Tiny], name: str
) -> None:
    cold = _generator(models[name].config())
    warm = _generator(models[name].config())
    await warm.prefill(HISTORY[:2])
    assert await warm.reply(HISTORY) == await cold.reply(HISTORY)
    saved = cold.last_stats.prefilled_tokens - warm.last_stats.prefilled_tokens
    assert saved >= models[name].block_size


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("threshold", "carry_blocks"), [(0.9, 4), (0.05, 0)])
def test_the_fixed_shape_steps_decode_what_the_eager_decoder_decodes(
    models: dict[str, Tiny], name: str, threshold: float, carry_blocks: int
) -> None:
    """The graphed decoder's steps (run eagerly here, as on every CPU) against the eager
    decoder, token for token and step for step, over turns that grow the cache across
    buckets, with a prefill while 'the caller speaks' before the third: prompt blocks carried
    by the fixed-shape step (``carry_blocks`` 4) or by one eager forward (0)."""
    size = models[name].block_size
    model = load_open_weights(models[name].directory, CPU, size)
    # Short replies: each step of the fixed-shape decoder decides over a whole block of
    # 151,936-wide rows, which on CPU costs what the GPU does not.
    options = DecodingOptions(confidence_threshold=threshold, max_reply_tokens=12)
    eager = OpenWeightsDecoder(model, options, VirtualClock())
    fixed = GraphedOpenWeightsDecoder(
        model, options, VirtualClock(), capture=False, carry_blocks=carry_blocks
    )
    history: list[Turn] = []
    for turn in range(3):
        if turn == 2:
            context = model.chat.prompt(history, 6, 1024)[:-1]
            eager.prefill(context)
            fixed.prefill(context)
            assert fixed.cache.ids == eager.cache.ids
        history.append(Turn("user", tiny.TEXTS[turn]))
        prompt = model.chat.prompt(history, 6, 1024)
        expected, got = ReplyStats(), ReplyStats()
        expected_pieces = [piece.text for piece in eager.decode(prompt, expected)]
        assert [piece.text for piece in fixed.decode(prompt, got)] == expected_pieces
        assert got.token_ids == expected.token_ids
        assert got.steps_per_block == expected.steps_per_block
        assert fixed.cache.ids == eager.cache.ids
        history.append(Turn("agent", expected.text))
    assert len(fixed.cache.ids) > 64  # past the smallest bucket


@pytest.mark.parametrize("name", NAMES)
def test_the_fixed_shape_decoder_counts_its_forwards_and_captures_every_bucket_at_start(
    models: dict[str, Tiny], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reply's forwards are its steps plus the blocks it carried into the cache (what the
    GPU bench divides a reply's time by); a capturing decoder captures the graph of every
    bucket the cache holds when it is made (a call's start), so no reply waits for one.
    Capture itself needs CUDA: here a stand-in records what would be captured and runs the
    step eagerly, which checks that warming changes neither the cache nor the reply."""
    size = models[name].block_size
    model = load_open_weights(models[name].directory, CPU, size)
    captured: list[int] = []

    class Recorded:
        def __init__(self, step: Callable[[], torch.Tensor]) -> None:
            assert torch.is_inference_mode_enabled()  # as decoding replays it: no autograd
            self._step = step
            step()  # the warm-up CapturedStep runs
            captured.append(len(captured))

        def replay(self) -> torch.Tensor:
            return self._step()

    monkeypatch.setattr(graphed_module, "CapturedStep", Recorded)
    options = DecodingOptions(confidence_threshold=0.9, max_reply_tokens=12)
    # carry_blocks 64: every block of the prompt is carried by a replay, none by one eager
    # forward (that is one forward for many blocks).
    warm = GraphedOpenWeightsDecoder(model, options, VirtualClock(), True, carry_blocks=64)
    assert sorted(warm._graphs) == [64, 128, 256, 512, 1024]
    assert warm.forwards == 0
    assert warm.kv.length == 0
    plain = GraphedOpenWeightsDecoder(model, options, VirtualClock(), False, carry_blocks=64)
    prompt = model.chat.prompt([Turn("user", tiny.TEXTS[0])], 6, 1024)
    for decoder in (warm, plain):
        stats = ReplyStats()
        list(decoder.decode(prompt, stats))
        carried = decoder.kv.length // size  # every block entered the cache by a replay
        assert decoder.forwards == sum(stats.steps_per_block) + carried
    assert warm.cache.ids == plain.cache.ids
    assert len(captured) == 5  # the reply captured nothing more
    # The carry limit measured (as on CUDA, where it is the default) leaves the cache, the
    # count and the next reply as they were.
    length, forwards, cached = plain.kv.length, plain.forwards, list(plain.cache.ids)
    assert plain.measure_carry_blocks(repeats=1) >= 1
    assert (plain.kv.length, plain.forwards, plain.cache.ids) == (length, forwards, cached)
    follow = model.chat.prompt([Turn("user", tiny.TEXTS[0]), Turn("agent", "ok"),
                                Turn("user", tiny.TEXTS[1])], 6, 1024)  # fmt: skip
    replies = []
    for decoder in (warm, plain):
        stats = ReplyStats()
        list(decoder.decode(follow, stats))
        replies.append(stats.token_ids)
    assert replies[0] == replies[1]


@dataclass(frozen=True)
class Trained:
    """How a family's checkpoints predict and commit, per its reference decoder — stated here
    apart from :mod:`cadence.llm.open_weights.families`, so that a wrong fact there fails a test."""

    family: Family
    shifted: bool
    """The output at *p* predicts *p + 1* (Fast-dLLM v2's token shift)."""
    window: int
    """Positions that may commit in one step: Fast-dLLM v2's sub-block, SDAR's block."""


TRAINED = {
    "fast-dllm-v2": Trained(FAST_DLLM_V2, shifted=True, window=8),
    "sdar": Trained(SDAR, shifted=False, window=4),
}


class ScriptedNetwork(QwenForCausalLM):
    """Predicts a script, position by position, as a trained model predicts its reply:
    ``script[p]`` is the token at absolute position ``p``. Makes the decoder's output exact."""

    def __init__(self, trained: Trained, script: dict[int, int], confidence: float) -> None:
        super().__init__(
            QwenShape(
                vocab_size=trained.family.mask_id + 7,
                hidden_size=4,
                intermediate_size=4,
                num_layers=0,
                num_heads=1,
                num_kv_heads=1,
                head_dim=4,
                rope_theta=1e4,
                rms_norm_eps=1e-6,
                tie_word_embeddings=True,
                qkv_bias=False,
                qk_norm=False,
            )
        )
        self.shifted, self.script = trained.shifted, script
        # The scripted token gets probability `confidence`, one other token the rest.
        self.margin = math.log(confidence / (1 - confidence))

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, *_: object) -> torch.Tensor:
        logits = torch.full((*ids.shape, self.shape.vocab_size), float("-inf"))
        targets = positions + 1 if self.shifted else positions
        for index, target in enumerate(targets[0].tolist()):
            logits[0, index, 0] = 0.0  # the runner-up
            logits[0, index, self.script.get(target, 1)] = self.margin
        return logits


def _chat(family: Family) -> tuple[ChatFormat, list[int]]:
    chat = ChatFormat(ChatTokenizer(Tokenizer.from_str(tiny.tokenizer_json(family))))
    return chat, chat.prompt(HISTORY, history_turns=3, max_context_tokens=512)


def _scripted(
    name: str, reply: str, confidence: float, clock: VirtualClock | None = None
) -> tuple[list[str], ReplyStats]:
    """Decode ``reply`` (with a stop token and words after it) from a scripted network."""
    trained, block_size = TRAINED[name], tiny.SPECS[name].block_size
    chat, prompt = _chat(trained.family)
    ids = [*chat.tokenizer.encode(reply), QWEN_CONTROL_IDS["<|im_end|>"]]
    ids += chat.tokenizer.encode(" thank you")  # never to be said
    network = ScriptedNetwork(trained, dict(enumerate(ids, start=len(prompt))), confidence)
    model = OpenWeightsModel(network, chat, trained.family, block_size)
    options = DecodingOptions(confidence_threshold=0.9, max_reply_tokens=40)
    decoder = OpenWeightsDecoder(model, options, clock or VirtualClock())
    stats = ReplyStats()
    pieces = [piece.text for piece in decoder.decode(prompt, stats)]
    assert len(prompt) % block_size  # leftover prompt tokens start the first block
    return pieces, stats


def _confident_steps(name: str, reply: str) -> list[int]:
    """Steps per block of a model sure of every position: one per window holding reply
    positions, and one more where the stop token waits for the positions left of it."""
    window, size = TRAINED[name].window, tiny.SPECS[name].block_size
    chat, prompt = _chat(TRAINED[name].family)
    start, stop = len(prompt), len(prompt) + len(chat.tokenizer.encode(reply))
    blocks = range(start // size, stop // size + 1)
    steps = [len({p // window for p in range(start, stop + 1) if p // size == b}) for b in blocks]
    steps[-1] += stop % window != 0
    return steps


REPLY = "Your table for two is booked at seven."


@pytest.mark.parametrize("name", NAMES)
def test_the_reply_is_the_model_s_up_to_the_stop_token(name: str) -> None:
    pieces, stats = _scripted(name, REPLY, confidence=0.99)
    assert stats.text == REPLY == "".join(pieces)
    assert len(pieces) > 1
    assert all(piece.startswith(" ") for piece in pieces[1:])
    # Confident: a whole window commits per step. Fast-dLLM v2 goes through its block of 32
    # in sub-blocks of 8 (the reply fits one block, in 2 or 3 of them); SDAR's blocks of 4
    # take a step each.
    assert stats.steps_per_block == _confident_steps(name, REPLY)


@pytest.mark.parametrize("name", NAMES)
def test_an_unsure_model_commits_one_position_per_step(name: str) -> None:
    _, stats = _scripted(name, REPLY, confidence=0.6)
    assert stats.text == REPLY
    assert sum(stats.steps_per_block) == len(stats.token_ids) + 1  # the stop token too


class _SteppingClock(VirtualClock):
    """Every reading is 400 ms later: every block runs late."""

    def now_ms(self) -> float:
        self._now += 400.0
        return self._now


def test_a_late_block_commits_more_per_step() -> None:
    _, on_time = _scripted("sdar", REPLY, confidence=0.6)
    _, late = _scripted("sdar", REPLY, confidence=0.6, clock=_SteppingClock())
    assert late.text == REPLY
    assert sum(late.steps_per_block) < sum(on_time.steps_per_block)


# --- files that disagree -----------------------------------------------------------------


def _rewrite(path: Path, **changes: object) -> None:
    tiny.write_json(path, json.loads(path.read_text(encoding="utf-8")) | changes)


def _other_family_weights(root: Path, models: dict[str, Tiny]) -> None:
    (root / "model.safetensors").unlink()
    for shard in models["sdar"].directory.glob("model*.safetensors*"):
        shutil.copy(shard, root)


Breakage = Callable[[Path, dict[str, Tiny]], object]
BROKEN: dict[str, tuple[str, Breakage, str]] = {
    "mask id in tokenizer.json": (
        "fast-dllm-v2",
        lambda root, _: (root / "tokenizer.json").write_text(
            tiny.tokenizer_json(replace(FAST_DLLM_V2, mask_id=151666)), encoding="utf-8"
        ),
        r"tokenizer\.json: \|<MASK>\| has id 151666; Fast-dLLM v2 uses 151665",
    ),
    "mask id in config.json": (
        "sdar",
        lambda root, _: _rewrite(root / "config.json", mask_token_id=151670),
        r"config\.json: mask_token_id is 151670; SDAR uses 151669",
    ),
    "missing tokenizer": (
        "sdar",
        lambda root, _: (root / "tokenizer.json").unlink(),
        r"tokenizer\.json: missing",
    ),
    "wrong architecture": (
        "fast-dllm-v2",
        lambda root, _: _rewrite(
            root / "config.json", architectures=["Qwen2ForCausalLM"], model_type="qwen2"
        ),
        r"config\.json: architectures \['Qwen2ForCausalLM'\] is not an open-weight",
    ),
    "weights of the other family": (
        "fast-dllm-v2",
        _other_family_weights,
        r"model\.safetensors\.index\.json: lacks \d+ tensor\(s\) of the Qwen2\.5 decoder",
    ),
    "missing shard": (
        "sdar",
        lambda root, _: (root / "model-00002-of-00003.safetensors").unlink(),
        r"index\.json: names shard 'model-00002-of-00003\.safetensors', which is missing",
    ),
    "tensor of another shape": (
        "sdar",
        lambda root, _: _rewrite(root / "config.json", intermediate_size=48),
        r"model-0000\d-of-00003\.safetensors: model\.layers\.0\.mlp\.\w+_proj\.weight is",
    ),
    "not ChatML": (
        "sdar",
        lambda root, _: _rewrite(root / "tokenizer_config.json", chat_template="{{ messages }}"),
        r"tokenizer_config\.json: chat_template is missing or not ChatML",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_file_that_disagrees_fails_naming_it(
    models: dict[str, Tiny], case: str, tmp_path: Path
) -> None:
    name, breakage, message = BROKEN[case]
    root = tmp_path / name
    shutil.copytree(models[name].directory, root)
    breakage(root, models)
    with pytest.raises(CheckpointError, match=rf"^models\.llm\.checkpoint: .*{message}"):
        create_generator(models[name].config(checkpoint=str(root)))


def test_settings_that_do_not_fit_the_directory_are_named(models: dict[str, Tiny]) -> None:
    fast = models["fast-dllm-v2"]
    with pytest.raises(CheckpointError, match=r"^models\.llm\.block_size: .*bd_size is 32"):
        create_generator(fast.config(block_size=8))
    with pytest.raises(CheckpointError, match=r"^models\.llm\.backend: 'ar'.*set backend: dllm"):
        create_generator(fast.config(backend="ar"))
    if not torch.cuda.is_available():
        with pytest.raises(CheckpointError, match=r"^models\.llm\.device: cuda, but torch sees"):
            create_generator(fast.config(device="cuda"))
