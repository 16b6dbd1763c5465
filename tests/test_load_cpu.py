"""The load test's CPU per call: measured per level, kept in the level's file, and read back
from files written before it was measured."""

from __future__ import annotations

import json

from cadence.tooling.bench.load import LevelResult


def test_cpu_per_call_is_kept_and_read_back() -> None:
    result = LevelResult(sessions=4, minutes=1.0, calls=8, cpu_s=12.0)
    assert result.cpu_s_per_call == 1.5
    again = LevelResult.from_json(result.to_json())
    assert again.cpu_s_per_call == 1.5
    older = json.loads(result.to_json())
    del older["cpu_s"]  # a level run before CPU was measured
    assert LevelResult.from_json(json.dumps(older)).cpu_s_per_call is None
    assert LevelResult(sessions=1, minutes=1.0, cpu_s=3.0).cpu_s_per_call is None  # no calls
