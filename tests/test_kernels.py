"""The kernel dispatcher and the PyTorch references, on CPU (no Triton needed)."""

from __future__ import annotations

import math

import pytest
import torch
from prerequisites import requires

from cadence import kernels
from cadence.kernels.commit_reference import commit_reference, select_commits, top_predictions
from cadence.kernels.cuda_graph import CapturedStep, bucket_length
from cadence.kernels.reference import block_attention_reference
from cadence.llm.checkpoint import EMBEDDED_DIR
from cadence.tooling.bench import kernels as bench

NEG_INF = float("-inf")


def test_cpu_tensors_take_the_reference_path() -> None:
    assert kernels.backend(torch.device("cpu")) == "reference"


def test_whether_triton_is_installed_is_looked_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module search per call cost the commit step several microseconds on the GPU (the
    dispatched commit ran 5-7 % over the Triton kernel it chose)."""
    import importlib.util

    from cadence.kernels import dispatch

    searches: list[str] = []
    real = importlib.util.find_spec

    def counted(name: str, package: str | None = None) -> object:
        searches.append(name)
        return real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", counted)
    dispatch.triton_installed.cache_clear()
    try:
        for _ in range(5):
            kernels.backend(torch.device("cuda"))
        assert searches == ["triton"]
    finally:
        dispatch.triton_installed.cache_clear()


def test_a_forced_backend_holds_inside_the_block_only() -> None:
    with kernels.use_backend("triton"):
        assert kernels.backend(torch.device("cpu")) == "triton"
    assert kernels.backend(torch.device("cpu")) == "reference"


def test_attention_matches_an_explicit_masked_softmax() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8) for _ in range(3))
    allowed = torch.rand(2, 1, 5, 5) > 0.4
    allowed |= torch.eye(5, dtype=torch.bool)  # every row sees at least itself
    scores = q @ k.transpose(-1, -2) / math.sqrt(8)
    expected = scores.masked_fill(~allowed, NEG_INF).softmax(-1) @ v
    torch.testing.assert_close(kernels.attention(q, k, v, allowed), expected)


def _explicit_block_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: list[int]
) -> torch.Tensor:
    """Per sequence and head: softmax over the valid cache slots and the block's keys."""
    block, group = q.shape[2], q.shape[1] // k.shape[1]
    slots = k.shape[2] - block
    out = torch.empty_like(q)
    for b, length in enumerate(lengths):
        seen = [*range(length), *range(slots, slots + block)]
        for h in range(q.shape[1]):
            keys, values = k[b, h // group, seen], v[b, h // group, seen]
            out[b, h] = (q[b, h] @ keys.T / math.sqrt(q.shape[3])).softmax(-1) @ values
    return out


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_block_attention_sees_the_valid_cache_and_the_whole_block(kv_heads: int) -> None:
    torch.manual_seed(1)
    q = torch.randn(3, 4, 5, 8)
    k, v = torch.randn(3, kv_heads, 16 + 5, 8), torch.randn(3, kv_heads, 16 + 5, 8)
    lengths = [0, 9, 16]
    k[1, :, 9:16] = 1e4  # padding past the length: seen, it would dominate every row
    expected = _explicit_block_attention(q, k, v, lengths)
    got = kernels.attention(q, k, v, kernels.CachedBlock(torch.tensor(lengths)))
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(block_attention_reference(q, k, v, torch.tensor(lengths)), got)


def test_the_top_prediction_skips_banned_ids_and_survives_all_minus_inf_rows() -> None:
    logits = torch.tensor([[0.0, 5.0, 1.0, 2.0], [NEG_INF] * 4])
    confidence, prediction = top_predictions(logits, torch.tensor([1]))
    assert prediction.tolist() == [3, 0]
    expected = math.exp(2) / (1 + math.exp(1) + math.exp(2))
    assert confidence.tolist() == pytest.approx([expected, 0.0])


def test_an_all_minus_inf_position_is_never_committed() -> None:
    logits = torch.zeros(1, 3, 6)
    logits[0, 0] = NEG_INF
    logits[0, 1, 4] = 10.0
    decision = commit_reference(
        logits, torch.tensor([[True, True, False]]), 0.9, torch.tensor([0]), torch.tensor([2])
    )
    assert decision.commit.tolist() == [[False, True, False]]
    assert decision.prediction[0, 1] == 4
    assert not decision.confidence.isnan().any()
    # with no other position eligible, "at least one" does not pick the −inf one
    alone = commit_reference(
        logits, torch.tensor([[True, False, False]]), 0.9, torch.tensor([0]), torch.tensor([2])
    )
    assert not alone.commit.any()


def test_the_commit_rule_applies_per_sequence_of_a_batch() -> None:
    confidence = torch.tensor([[0.95, 0.5, 0.9, 0.3], [0.2, 0.5, 0.4, 0.5]])
    prediction = torch.tensor([[7, 8, 9, 10], [7, 8, 9, 10]])
    masked = torch.ones(2, 4, dtype=torch.bool)
    commit = select_commits(confidence, prediction, masked, 0.9, torch.tensor([2]))
    # row 1: nothing reaches τ, so its most confident position commits (the first of equals)
    assert commit.tolist() == [[True, False, True, False], [False, True, False, False]]


def test_the_threshold_may_be_a_device_tensor() -> None:
    torch.manual_seed(2)
    logits, masked = torch.randn(2, 8, 50) * 4, torch.rand(2, 8) > 0.3
    banned, ends = torch.tensor([1, 3]), torch.tensor([2, 0])
    as_float = commit_reference(logits, masked, 0.4, banned, ends)
    as_tensor = commit_reference(logits, masked, torch.tensor([0.4]), banned, ends)
    assert torch.equal(as_float.commit, as_tensor.commit)


@pytest.mark.parametrize(
    ("length", "bucket"), [(0, 64), (1, 64), (64, 64), (65, 128), (128, 128), (1000, 1024)]
)
def test_cache_lengths_round_up_to_power_of_two_buckets(length: int, bucket: int) -> None:
    assert bucket_length(length) == bucket


def test_a_negative_cache_length_is_refused() -> None:
    with pytest.raises(ValueError, match="-1"):
        bucket_length(-1)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given without CUDA")
def test_capturing_a_graph_without_cuda_says_so() -> None:
    with pytest.raises(RuntimeError, match="CUDA"):
        CapturedStep(lambda: torch.zeros(1))


@requires(
    (EMBEDDED_DIR / "dllm.pt").exists(), "needs the shipped checkpoint llm/checkpoints/dllm.pt"
)
def test_the_bench_times_each_kernel_step_and_reply_on_cpu() -> None:
    cpu = torch.device("cpu")
    chosen = bench.implementations(cpu, interpreter=False)
    with torch.inference_mode():
        rows = [*bench.kernel_rows(cpu, chosen, 3), *bench.decode_rows(cpu, chosen, 3)]
    assert [row.measure for row in rows] == [
        "commit step",
        "block attention",
        "block attention",
        "eager step",
        "first piece (eager steps)",
        "whole reply (eager steps)",
        "fixed-shape step",
        "first piece (fixed-shape steps)",
        "whole reply (fixed-shape steps)",
    ]
    assert all(len(row.times_ms) == 3 and row.median > 0 for row in rows)
    report = bench.markdown(rows, "title", None, "python -m cadence.tooling.bench.kernels")
    assert report.count("| reference |") == len(rows)
