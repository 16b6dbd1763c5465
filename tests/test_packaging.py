"""What each distribution installs, built as pip builds it: ``pip install .`` brings the runtime
and nothing of the lab (no bench, training, emulator or corpus code), and its ``cadence
--help`` lists only what a deployment runs; the lab's wheel (``tooling/``) brings the lab and
adds its commands to the same ``cadence`` (docs/architecture.md, "The runtime and the lab").

Each wheel is built from a copy of the checkout, so the build's own folders never land in it,
and each ``cadence --help`` runs in a fresh virtual environment that sees the development
environment's third-party packages but none of Cadence's own installs.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cadence.cli.app import COMMANDS_GROUP, build_app

ROOT = Path(__file__).parents[1]
COPIED = [
    "cadence", "core", "kernels", "voice", "llm", "pipeline", "web", "report", "cli", "tooling",
    "pyproject.toml", "README.md",
]  # fmt: skip
"""What a build reads: the package folders, the links under cadence/, the project files."""

RUNTIME_COMMANDS = {"config", "serve", "prepare", "say", "transcribe", "turn-score", "report"}
"""What a deployment runs: the six the issue that split the lab out named, and ``prepare``
(the language model's int8 graph built before the first start)."""

LAB_COMMANDS = {"bench", "bench-turns", "loadtest", "train", "eval-lm", "converse"}
"""A few of the lab's commands, each of which a deployment has no use for."""

LAB_PACKAGES = ("bench", "training", "emulators")


def _build(source: Path, out: Path) -> Path:
    before = set(out.glob("*.whl"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = set(out.glob("*.whl")) - before
    return wheel


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tree = tmp_path_factory.mktemp("checkout")
    ignore = shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tree / name, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(source, tree / name)
    out = tmp_path_factory.mktemp("wheels")
    return {"runtime": _build(tree, out), "lab": _build(tree / "tooling", out)}


def _names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def _entry_points(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
        return archive.read(name).decode()


def test_the_runtime_wheel_carries_the_runtime_and_no_lab(wheels: dict[str, Path]) -> None:
    names = _names(wheels["runtime"])
    assert [n for n in names if n.startswith("cadence/tooling")] == []
    for package in ["core", "kernels", "voice", "llm", "pipeline", "web", "report", "cli"]:
        assert f"cadence/{package}/__init__.py" in names
    for data in [
        "cadence/web/static/index.html",
        "cadence/llm/adapters/smollm2-ar.safetensors",
        "cadence/llm/pretrained/turn_end_calibration.json",
        "cadence/llm/pretrained/turn_end_calibration.smollm2-ar.json",
        "cadence/voice/turn/weights/text_end_of_turn.npz",
        "cadence/pipeline/tools/data/sgd_services.json.gz",
    ]:
        assert data in names
    # The 5.9 M models are retired from the runtime: a checkout keeps them (llm/checkpoint.py).
    assert [n for n in names if n.startswith("cadence/llm/checkpoints/")] == []
    assert _entry_points(wheels["runtime"]).split() == [
        "[console_scripts]",
        "cadence",
        "=",
        "cadence.cli.app:main",
    ]


def test_the_lab_wheel_carries_the_lab_and_its_commands(wheels: dict[str, Path]) -> None:
    names = _names(wheels["lab"])
    modules = [n for n in names if n.endswith(".py")]
    assert modules
    assert all(n.startswith("cadence/tooling/") for n in modules)
    for package in LAB_PACKAGES:
        assert f"cadence/tooling/{package}/__init__.py" in names
    assert "[cadence.commands]" in _entry_points(wheels["lab"])


def _commands_in_fresh_environment(tmp_path: Path, wheels: list[Path]) -> set[str]:
    """The commands ``cadence --help`` lists where only ``wheels`` of Cadence are installed
    (the click group's, which is what the help is made from)."""
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
    # The development environment's third-party packages, without Cadence's own installs.
    others = tmp_path / "third-party"
    others.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(("cadence", "__editable__", "_cadence")):
            (others / entry.name).symlink_to(entry)
    (site / "third_party.pth").write_text(f"{others}\n")
    listing = "print(*sorted(typer.main.get_command(app).commands))"  # what --help lists
    result = subprocess.run(
        [python, "-c", f"import typer.main; from cadence.cli.app import app; {listing}"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", "PYTHONPATH": ""},
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "unavailable" not in result.stderr
    return set(result.stdout.split())


def test_a_runtime_install_lists_only_the_runtime_commands(
    wheels: dict[str, Path], tmp_path: Path
) -> None:
    assert _commands_in_fresh_environment(tmp_path, [wheels["runtime"]]) == RUNTIME_COMMANDS


def test_the_lab_adds_its_commands_to_the_same_cadence(
    wheels: dict[str, Path], tmp_path: Path
) -> None:
    commands = _commands_in_fresh_environment(tmp_path, list(wheels.values()))
    assert commands >= RUNTIME_COMMANDS
    assert commands >= LAB_COMMANDS


def test_a_plugin_that_cannot_load_costs_only_its_own_commands(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = EntryPoint("broken", "cadence_nowhere.commands:register", COMMANDS_GROUP)
    with caplog.at_level(logging.WARNING, logger="cadence.cli.app"):
        app = build_app(plugins=[broken])
    assert "cadence_nowhere.commands:register" in caplog.text
    assert "No module named 'cadence_nowhere'" in caplog.text
    result = CliRunner().invoke(app, ["config", "show", "--defaults"])
    assert result.exit_code == 0, result.output
    assert "end_of_turn:" in result.output
