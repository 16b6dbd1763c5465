"""``cadence train``, ``distil``, ``generate`` and ``eval-lm`` end to end on a tiny corpus."""

from __future__ import annotations

import json
from pathlib import Path

import llm_tiny
from typer.testing import CliRunner

from cadence.cli.app import app
from cadence.llm.checkpoint import load_model
from cadence.tooling.training.corpus import read_dialogues, write_dialogues

runner = CliRunner()


def _train(tmp_path: Path, objective: str, *extra: str) -> Path:
    out = tmp_path / objective
    result = runner.invoke(
        app,
        [
            "train",
            "--objective",
            objective,
            "--out",
            str(out),
            "--corpus",
            str(tmp_path / "tiny.jsonl"),
            "--validation",
            str(tmp_path / "tiny.jsonl"),
            "--epochs",
            "0.5",
            "--batch-tokens",
            "256",
            "--threads",
            "1",
            *extra,
        ],
    )
    assert result.exit_code == 0, result.output
    return out / "model.pt"


def test_train_distil_generate_and_evaluate(tmp_path: Path) -> None:
    corpus = tmp_path / "tiny.jsonl"
    write_dialogues(corpus, list(llm_tiny.DIALOGUES))
    ar = _train(tmp_path, "ar")
    dllm = _train(tmp_path, "bd3", "--init", str(ar))

    distilled = tmp_path / "distilled.jsonl"
    result = runner.invoke(
        app,
        ["distil", "--teacher", str(ar), "--out", str(distilled), "--corpus", str(corpus)],
    )
    assert result.exit_code == 0, result.output
    assert len(read_dialogues(distilled)) == len(llm_tiny.DIALOGUES)

    result = runner.invoke(
        app, ["generate", "Hello there", "--backend", "dllm", "--checkpoint", str(dllm)]
    )
    assert result.exit_code == 0, result.output
    assert "ms" in result.output
    assert "blocks" in result.output

    report = tmp_path / "report.json"
    result = runner.invoke(
        app,
        [
            "eval-lm",
            "--corpus",
            str(corpus),
            "--dialogues",
            "1",
            "--json",
            str(report),
            "--dllm",
            str(dllm),
            "--ar",
            str(ar),
            "--threads",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    backends = json.loads(report.read_text())["backends"]
    assert [b["backend"] for b in backends] == ["dllm", "ar"]
    # A block takes a step per position at most (one commit each), and at least one.
    block_size = load_model(dllm).model.config.block_size
    assert 1.0 <= backends[0]["steps_per_block_mean"] <= block_size
    assert backends[1]["steps_per_block_mean"] is None
    assert all(b["replies"] == 2 for b in backends)


def test_generate_names_the_config_key_when_the_checkpoint_is_missing(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["generate", "Hi", "--backend", "ar", "--checkpoint", str(tmp_path / "none.pt")]
    )
    assert result.exit_code == 2
    assert "models.llm.checkpoint" in result.output
