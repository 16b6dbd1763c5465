"""The floor plan holds: the packages are the ones the docs and the build name, all under
``cadence.``, every module is on the map of ``docs/architecture.md``, and every name spells an
acronym one way.

The direction of dependence itself is checked by the import contract (``lint-imports`` in
``make lint``; ``[tool.importlinter]`` in ``pyproject.toml``).
"""

from __future__ import annotations

import ast
import importlib.util
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGES = ["core", "kernels", "voice", "llm", "pipeline", "web", "report", "cli", "tooling"]
"""The installed packages, from the ground floor up."""

ACRONYMS = {
    "api", "ar", "bpe", "cpu", "cuda", "dllm", "dtmf", "gpu", "http", "ice", "json", "jsonl",
    "kv", "llm", "otlp", "pcm", "rtp", "sdp", "sip", "sse", "stt", "tcp", "tts", "udp", "url",
    "uuid", "vad", "webrtc", "wer",
}  # fmt: skip
"""Written in capitals inside CapWords names (PEP 8): ``VADConfig``, ``WebRTCCall``."""

_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z][a-z0-9]*|[a-z0-9]+")


def _modules(package: str) -> list[Path]:
    return sorted(p for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts)


def test_the_build_the_contract_and_the_folders_name_the_same_packages() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["tool"]["setuptools"]["packages"]["find"]["include"] == ["cadence*"]
    assert project["tool"]["setuptools"]["packages"]["find"]["exclude"] == ["cadence.tooling*"]
    lab = tomllib.loads((ROOT / "tooling" / "pyproject.toml").read_text())["tool"]["setuptools"]
    lab_folders = sorted(p.parent for p in (ROOT / "tooling").rglob("__init__.py"))
    assert lab["packages"] == [
        ".".join(["cadence", *folder.relative_to(ROOT).parts]) for folder in lab_folders
    ]
    contract = project["tool"]["importlinter"]
    assert contract["root_packages"] == ["cadence"]
    layers = next(c["layers"] for c in contract["contracts"] if c["type"] == "layers")
    layered = [name for layer in layers for name in layer.split(" | ")]
    assert sorted(layered) == sorted(f"cadence.{package}" for package in PACKAGES)
    folders = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))
    assert folders == sorted([*PACKAGES, "cadence"])


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_installs_under_cadence_from_its_folder(package: str) -> None:
    link = ROOT / "cadence" / package
    assert link.is_symlink()
    assert link.readlink() == Path("..", package)
    spec = importlib.util.find_spec(f"cadence.{package}")
    assert spec is not None
    assert spec.origin is not None
    assert Path(spec.origin).resolve() == (ROOT / package / "__init__.py").resolve()


def test_nothing_imports_a_package_by_its_folder_name() -> None:
    # `import llm` would load a second copy of every module, whose classes are other types.
    bare = re.compile(rf"^\s*(?:from|import) (?:{'|'.join(PACKAGES)})\b", flags=re.MULTILINE)
    offenders = [
        str(path.relative_to(ROOT))
        for folder in [*PACKAGES, "tests", "examples"]
        for path in _modules(folder)
        if bare.search(path.read_text())
    ]
    assert offenders == []


def test_the_readme_table_lists_every_package() -> None:
    readme = (ROOT / "README.md").read_text()
    listed = re.findall(r"^\| `(\w+)/` \|", readme, flags=re.MULTILINE)
    assert sorted(listed) == sorted([*PACKAGES, "configs"])


def test_the_architecture_map_names_every_module_and_nothing_else() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    folders = "|".join(PACKAGES)
    on_map = set(re.findall(rf"`((?:{folders})/[\w/]+\.py)`", text))
    files = {str(path.relative_to(ROOT)) for package in PACKAGES for path in _modules(package)}
    modules = {name for name in files if not name.endswith("__init__.py")}
    assert sorted(modules - on_map) == [], "modules missing from docs/architecture.md"
    assert sorted(on_map - files) == [], "docs/architecture.md names modules that do not exist"


def _cap_words_names(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name) and t.id[:1].isupper()]
    return [name for name in names if not name.isupper()]  # CONSTANTS are all capitals


def mixed_case_acronyms(name: str) -> list[str]:
    """The words of CapWords ``name`` that are acronyms not written in capitals."""
    words = _WORDS.findall(name.lstrip("_"))
    return [w for w in words if w.lower() in ACRONYMS and not w.isupper()]


def test_the_acronym_check_tells_the_two_casings_apart() -> None:
    assert mixed_case_acronyms("WebrtcVoiceDetector") == ["Webrtc"]
    assert mixed_case_acronyms("_VadEventKind") == ["Vad"]
    assert mixed_case_acronyms("OpenAILLMConfig") == []
    assert mixed_case_acronyms("WebRTCCall") == []
    assert mixed_case_acronyms("PCM16") == []


def test_every_name_spells_its_acronyms_in_capitals() -> None:
    offenders = {
        f"{path.relative_to(ROOT)}: {name}"
        for package in [*PACKAGES, "tests", "examples"]
        for path in _modules(package)
        for name in _cap_words_names(path)
        if mixed_case_acronyms(name)
    }
    assert sorted(offenders) == []
