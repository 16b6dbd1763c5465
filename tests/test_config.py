"""Configuration: the shipped default, precise errors and the `cadence config` commands."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cadence.pipeline.config import (
    CadenceConfig,
    ConfigError,
    VADConfig,
    load_config,
    render_defaults,
)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "configs" / "default.yaml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_default_yaml_is_the_rendering_of_the_built_in_defaults() -> None:
    assert DEFAULT.read_text() == render_defaults(), "run: cadence config show --defaults"
    assert load_config(DEFAULT) == CadenceConfig()


def test_default_configuration_is_offline() -> None:
    config = load_config(DEFAULT)
    assert config.models.stt.model.startswith("embedded:")
    assert config.models.tts.voice.startswith("embedded:")
    assert config.models.llm.checkpoint.startswith("embedded:")
    assert config.models.llm.backend != "openai"
    assert config.tracing.otlp_endpoint is None
    assert config.server.host == "127.0.0.1"


def test_a_partial_file_keeps_the_other_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "vad:\n  endpoint_silence_ms: 300\n"))
    assert config.vad.endpoint_silence_ms == 300
    # Everything else is the built-in default, in that section and in every other.
    assert config.vad == VADConfig(endpoint_silence_ms=300)
    assert config.model_copy(update={"vad": VADConfig()}) == CadenceConfig()


def test_errors_name_the_file_the_line_the_key_and_the_expectation(tmp_path: Path) -> None:
    path = write(tmp_path, "vad:\n  mode: 7\nmodels:\n  stt:\n    modle: small.en\n")
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert error.value.problems == [
        f"{path}:2: vad.mode: Input should be less than or equal to 3 (got 7)",
        f"{path}:5: models.stt.modle: unknown key (did you mean `model`?)",
    ]


def test_cross_field_rules_are_explained(tmp_path: Path) -> None:
    path = write(tmp_path, "models:\n  llm:\n    backend: openai\n")
    with pytest.raises(ConfigError, match=r"c\.yaml:2: models\.llm: backend `openai` needs"):
        load_config(path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("vad: [\n", r"c\.yaml:2: not valid YAML"),
        ("- a\n- b\n", r"c\.yaml:1: expected a mapping"),
        ("nonsense: 1\n", r"c\.yaml:1: nonsense: unknown key; known keys: models, vad"),
    ],
)
def test_malformed_files(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_config(write(tmp_path, text))


def test_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")


def cadence(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("cadence")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)


def test_cli_help_lists_the_subcommands() -> None:
    result = cadence("--help")
    assert result.returncode == 0
    assert "config" in result.stdout


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_cli_config_check_passes_every_shipped_config(path: Path) -> None:
    ok = cadence("config", "check", str(path))
    assert ok.returncode == 0, ok.stderr
    assert "OK" in ok.stdout


def test_cli_config_check_rejects_a_bad_file_with_a_clear_message(tmp_path: Path) -> None:
    bad = cadence("config", "check", str(write(tmp_path, "budget:\n  stt: fast\n")))
    assert bad.returncode == 2
    assert "c.yaml:2: budget.stt: Input should be a valid number" in bad.stderr


def test_cli_config_show_merges_a_file_over_the_defaults(tmp_path: Path) -> None:
    shown = cadence("config", "show", str(write(tmp_path, "server:\n  port: 9000\n")))
    assert shown.returncode == 0
    assert "  port: 9000\n" in shown.stdout
    assert "  host: 127.0.0.1\n" in shown.stdout
