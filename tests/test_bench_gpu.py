"""The GPU check's command line and report (``python -m cadence.tooling.bench.gpu``), on CPU
with tiny random-weight models at the real vocabulary: every section runs, and the report
holds every figure the device run is read for. Its figures here say nothing about speed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from prerequisites import requires

from cadence.llm.checkpoint import EMBEDDED_DIR
from cadence.tooling.bench import gpu

ROOT = Path(__file__).parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cadence.tooling.bench.gpu", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@requires(
    (EMBEDDED_DIR / "dllm.pt").exists(), "needs the shipped checkpoint llm/checkpoints/dllm.pt"
)
def test_the_check_runs_every_section_on_cpu_and_writes_its_report(tmp_path: Path) -> None:
    out = tmp_path / "report"
    done = _run("--out", str(out), "--device", "cpu", "--turns", "2", "--repeats", "3",
                "--reply-tokens", "8")  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["status"] == "ok"
    assert report["errors"] == []
    assert report["skipped"] == []
    assert report["device"] == "CPU"
    assert report["size"] == "tiny"
    assert report["command"].startswith("python -m cadence.tooling.bench.gpu --out ")
    # The commit step at every shape the project runs, with the families' banned counts.
    shapes = {(row["model"], row["shape"], row["banned"]) for row in report["commit"]}
    assert ("fast-dllm-v2", "1×32×151936", "272 (published tokenizer)") in shapes
    assert ("sdar", "1×4×151936", "268 (published tokenizer)") in shapes
    assert ("embedded model", "1×8×4096", "3 ids") in shapes
    assert all(row["reference"]["runs"] == 3 for row in report["commit"])
    assert len(report["attention"]) == 4
    for name, block in (("fast-dllm-v2", 32), ("sdar", 4)):
        family = report[name]
        assert family["block"] == block
        assert family["parameters"] > 0
        assert [s["step"] for s in family["steps"]] == [
            "eager, reference kernels",
            "fixed-shape (eager)",
        ]
        replies = [(r["decoder"], r["prefill"]) for r in family["replies"]]
        assert replies == [("graphed", False), ("graphed", True), ("eager", False)]
        for row in family["replies"]:
            assert row["first_piece"]["runs"] == 2
            assert row["first_piece"]["p50_ms"] <= row["whole_reply"]["p50_ms"]
            assert 0 < row["reply_tokens"] <= 8
            assert row["setup_ms"] >= 0  # a call's set-up (captures), outside the replies
            if row["decoder"] == "graphed":  # carries count: a reply has more forwards than steps
                assert row["forwards_per_reply"] > row["steps_per_reply"]
                assert 1 <= row["forwards_to_first_piece"]["p50_ms"] <= row["forwards_per_reply"]
                assert row["ms_per_forward"] < row["ms_per_step"]
                assert row["carry_blocks"] == 16  # measured on CUDA only
    assert {row["measure"] for row in report["embedded"]} >= {"eager step", "fixed-shape step"}
    markdown = (out / "report.md").read_text(encoding="utf-8")
    assert markdown.startswith("# GPU check on CPU")
    for heading in ("## Commit step", "## Block attention", "## fast-dllm-v2", "## sdar"):
        assert heading in markdown
    assert "## Embedded model" in markdown
    assert (
        "| forwards_to_first_piece | forwards_per_reply | ms_per_forward | setup_ms"
        " | carry_blocks |" in markdown
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given without CUDA")
def test_without_a_gpu_the_check_says_so_and_fails(tmp_path: Path) -> None:
    done = _run("--out", str(tmp_path))
    assert done.returncode == gpu.NO_GPU_STATUS
    assert "no GPU" in done.stderr
    assert "--device cpu" in done.stderr
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert report["status"] == "no GPU"
    assert "nothing was measured" in (tmp_path / "report.md").read_text(encoding="utf-8")


def test_the_targets_read_the_figures_they_name() -> None:
    row = {"p50_ms": 2.0, "p90_ms": 3.0, "runs": 5}
    replies = [
        {"decoder": "graphed", "prefill": False, "first_piece": {"p50_ms": 20.0, "p90_ms": 70.0}},
        {"decoder": "graphed", "prefill": True, "first_piece": {"p50_ms": 25.0, "p90_ms": 50.0}},
    ]
    report = {"sdar": {"steps": [{"step": "graphed (CUDA graph)", **row}], "replies": replies}}
    met = {t["target"]: t["met"] for t in gpu.targets(report)}
    assert met == {
        "sdar: step ≤ 3.0 ms": True,
        "sdar: first piece p50 ≤ 30 ms (without prefill)": True,
        "sdar: first piece p90 ≤ 60 ms (without prefill)": False,
        "sdar: first piece p50 ≤ 30 ms (with prefill)": True,
        "sdar: first piece p90 ≤ 60 ms (with prefill)": True,
        "sdar: first piece p50 with prefill ≤ without": False,
        "sdar: first piece p90 with prefill ≤ without": True,
    }
