"""`cadence bench` end to end on real clips (real models, real time), and its report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cadence.pipeline.tracing import AnchorEvent, read_traces
from cadence.report import ReportSummary

MANIFEST = Path(__file__).parent / "data" / "speech" / "manifest.jsonl"


def cadence(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("cadence")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=600)


def test_bench_with_ablations_writes_a_report_that_cadence_report_reproduces(
    tmp_path: Path,
) -> None:
    manifest = tmp_path / "manifest.jsonl"
    rows = [json.loads(line) for line in MANIFEST.read_text().splitlines()]
    chosen = [r for r in rows if r["id"] in {"sb_spk2_snt4", "osr_us_0034_8k_s05"}]
    for row in chosen:
        row["file"] = str(MANIFEST.parent / row["file"])
    manifest.write_text("".join(json.dumps(r) + "\n" for r in chosen))

    out = tmp_path / "bench"
    result = cadence("bench", "-m", str(manifest), "-o", str(out), "--concurrency", "2",
                     "--ablate", "speculation")  # fmt: skip
    assert result.returncode == 0, result.stderr

    summary = ReportSummary.model_validate_json((out / "summary.json").read_text())
    assert summary.end_anchor == "audio_heard_first"  # the caller measured every turn
    assert sum(summary.outcomes.values()) == summary.turns
    assert summary.variant == "full"
    assert set(summary.variants) == {"full", "no_speculation"}
    assert summary.concurrency == 2
    assert summary.voice_to_voice_ms.count >= 2
    assert summary.wer is not None
    assert summary.wer <= 0.3
    assert summary.machine
    assert summary.variants["no_speculation"].speculation.hits == 0
    for name in ("report.md", "waterfall.png", "cdf.png", "traces.jsonl"):
        assert (out / name).stat().st_size > 0

    traces = read_traces(out / "traces.jsonl")
    answered = [t for t in traces if AnchorEvent.AUDIO_OUT_FIRST in t.events]
    assert {t.annotations["clip_id"] for t in answered} == {"sb_spk2_snt4", "osr_us_0034_8k_s05"}
    for trace in answered:  # the ground truth is in, the VAD's estimate beside it
        assert isinstance(trace.annotations["vad_speech_end_ms"], float)
        # What the caller heard came after what the server sent, on the same clock.
        heard = trace.events.get(AnchorEvent.AUDIO_HEARD_FIRST)
        if heard is not None:
            assert heard >= trace.events[AnchorEvent.AUDIO_OUT_FIRST]
    assert any(AnchorEvent.AUDIO_HEARD_FIRST in trace.events for trace in answered)

    rebuilt = cadence("report", str(out / "traces.jsonl"), "--out", str(tmp_path / "rebuilt"))
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert (tmp_path / "rebuilt" / "summary.json").read_text() == (out / "summary.json").read_text()


def test_an_unknown_ablation_is_refused(tmp_path: Path) -> None:
    result = cadence("bench", "-m", str(MANIFEST), "-o", str(tmp_path), "--ablate", "magic")
    assert result.returncode == 2
    assert "unknown ablation ['magic']" in result.stderr
