"""Tokenizer, training (loss goes down, resume is exact) and checkpoints."""

from __future__ import annotations

from pathlib import Path

import llm_tiny
import pytest
import torch

from cadence.llm.backends import create_generator
from cadence.llm.checkpoint import CheckpointError, load_model, resolve_checkpoint, save_model
from cadence.llm.options import LLMOptions
from cadence.llm.tokenizer import SPECIAL_TOKENS, DialogueTokenizer
from cadence.tooling.training.corpus import write_dialogues
from cadence.tooling.training.trainer import (
    FINAL_MODEL,
    Objective,
    TrainOptions,
    TrainProgress,
    train,
)

TEXTS = [
    "Hello, how can I help you today?",
    "Café → 東京 🎉 naïve  double  spaces\ttab",
    "",
    "$120.50 at 7:30 pm, confirmed #A-17.",
]


@pytest.mark.parametrize("text", TEXTS)
def test_tokenizer_round_trip(text: str) -> None:
    tokenizer = llm_tiny.tokenizer()
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_special_tokens_have_fixed_ids_and_survive_serialisation() -> None:
    tokenizer = llm_tiny.tokenizer()
    assert [tokenizer.special.pad, tokenizer.special.mask] == [0, 1]
    restored = DialogueTokenizer.from_json(tokenizer.to_json())
    assert restored.special == tokenizer.special
    assert restored.encode(TEXTS[1]) == tokenizer.encode(TEXTS[1])
    assert len(SPECIAL_TOKENS) == 5


def _options(tmp_path: Path, objective: Objective, **changes: object) -> TrainOptions:
    corpus = tmp_path / "tiny.jsonl"
    write_dialogues(corpus, list(llm_tiny.DIALOGUES) * 4)
    base = TrainOptions(
        objective=objective,
        corpora=(corpus,),
        validation=corpus,
        out_dir=tmp_path / objective,
        epochs=8,
        tokens_per_batch=128,
        learning_rate=3e-3,
        warmup_steps=2,
        vocab_size=300,
        block_size=4,
        max_turn_tokens=16,
        window_tokens=64,
        d_model=32,
        n_layers=2,
        n_heads=2,
        ffn_hidden=64,
        threads=1,
    )
    return TrainOptions(**{**base.__dict__, **changes})


@pytest.mark.parametrize("objective", ["ar", "bd3"])
def test_a_few_steps_lower_the_loss(tmp_path: Path, objective: Objective) -> None:
    losses: list[float] = []

    def record(progress: TrainProgress, loss: float, speed: float, total: int) -> None:
        losses.append(loss)

    progress = train(_options(tmp_path, objective), record)
    assert len(losses) >= 20
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:3]) / 3
    assert progress.history[-1]["validation_nll"] < losses[0]


def test_interrupted_training_resumes_to_the_same_weights(tmp_path: Path) -> None:
    continuous = _options(tmp_path, "bd3", epochs=2, out_dir=tmp_path / "continuous")
    train(continuous)
    interrupted = _options(tmp_path, "bd3", epochs=2, out_dir=tmp_path / "interrupted")
    stops = 0
    while not (interrupted.out_dir / FINAL_MODEL).exists():
        train(TrainOptions(**{**interrupted.__dict__, "max_minutes": 0.0}))
        stops += 1
    assert stops > 3  # it really was stopped and resumed, one step at a time
    a = load_model(continuous.out_dir / FINAL_MODEL).model.state_dict()
    b = load_model(interrupted.out_dir / FINAL_MODEL).model.state_dict()
    for name, tensor in a.items():
        torch.testing.assert_close(tensor, b[name], rtol=0, atol=0)


def test_a_diffusion_model_starts_from_an_ar_checkpoint(tmp_path: Path) -> None:
    ar = _options(tmp_path, "ar", epochs=1)
    train(ar)
    bd3 = _options(tmp_path, "bd3", epochs=0.1, init=ar.out_dir / FINAL_MODEL)
    train(bd3)
    loaded = load_model(bd3.out_dir / FINAL_MODEL)
    assert loaded.model.config.attention == "block_causal"
    assert loaded.metadata["init"] == str(ar.out_dir / FINAL_MODEL)


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    model, fmt = llm_tiny.model("block_causal"), llm_tiny.dialogue_format()
    save_model(tmp_path / "m.pt", model, fmt, {"note": "round trip"}, dtype=torch.float32)
    loaded = load_model(tmp_path / "m.pt")
    assert loaded.model.config == model.config
    assert loaded.metadata == {"note": "round trip"}
    assert loaded.format.max_turn_tokens == fmt.max_turn_tokens
    assert loaded.tokenizer.to_json() == fmt.tokenizer.to_json()
    ids = torch.randint(5, model.config.vocab_size, (1, 8))
    positions = torch.arange(8)[None]
    torch.testing.assert_close(
        loaded.model(ids, positions, None), model(ids, positions, None), rtol=0, atol=0
    )


def test_compact_checkpoints_are_half_precision(tmp_path: Path) -> None:
    model, fmt = llm_tiny.model("causal"), llm_tiny.dialogue_format()
    save_model(tmp_path / "m.pt", model, fmt, {})
    payload = torch.load(tmp_path / "m.pt", weights_only=True)
    assert {t.dtype for t in payload["state_dict"].values()} == {torch.float16}


def test_an_installed_package_without_the_small_models_says_where_they_are(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The runtime wheel leaves llm/checkpoints/ out (pyproject.toml's package data).
    from cadence.llm import checkpoint

    monkeypatch.setattr(checkpoint, "EMBEDDED_DIR", tmp_path)
    with pytest.raises(CheckpointError, match=r"models\.llm\.checkpoint: .*checkout.*smollm2-ar"):
        create_generator(LLMOptions(backend="dllm", checkpoint="embedded:dllm"))


@pytest.mark.parametrize("name", ["embedded:no-such-model", "/no/such/checkpoint.pt"])
def test_a_missing_checkpoint_fails_fast_naming_the_config_key(name: str) -> None:
    with pytest.raises(CheckpointError, match=r"models\.llm\.checkpoint"):
        resolve_checkpoint(name)
    with pytest.raises(CheckpointError, match=r"models\.llm\.checkpoint"):
        create_generator(LLMOptions(checkpoint=name))
