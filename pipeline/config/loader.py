"""Load a YAML configuration into ``CadenceConfig`` with errors a person can act on.

A bad file yields one line per problem: ``file:line: key.path: what was expected (got …)``.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from pipeline.config.models import CadenceConfig


class ConfigError(ValueError):
    """The configuration file is unreadable or invalid; ``problems`` has one line each."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.path = path
        self.problems = problems


def load_config(path: Path) -> CadenceConfig:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(path, [f"{path}: cannot read: {exc.strerror or exc}"]) from exc
    try:
        data = yaml.safe_load(text)
        lines = _key_lines(yaml.compose(text))
    except yaml.MarkedYAMLError as exc:
        line = f":{exc.problem_mark.line + 1}" if exc.problem_mark else ""
        reason = " ".join(part for part in (exc.context, exc.problem) if part)
        raise ConfigError(path, [f"{path}{line}: not valid YAML: {reason}"]) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(path, [f"{path}: not valid YAML: {exc}"]) from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(path, [f"{path}:1: expected a mapping of sections at the top level"])
    try:
        return CadenceConfig.model_validate(data)
    except ValidationError as exc:
        errors = sorted(exc.errors(), key=lambda e: _nearest_line(lines, _loc(e)) or 0)
        raise ConfigError(path, [_describe(path, lines, error) for error in errors]) from exc


def _describe(path: Path, lines: dict[tuple[str, ...], int], error: Any) -> str:
    loc = _loc(error)
    key = ".".join(loc) or "(top level)"
    line = _nearest_line(lines, loc)
    where = f"{path}:{line}" if line else str(path)
    if error["type"] == "extra_forbidden":
        return f"{where}: {key}: unknown key{_suggestion(loc)}"
    if error["type"] == "missing":
        return f"{where}: {key}: required key is missing"
    if error["type"] == "value_error":  # a cross-field rule of the section
        return f"{where}: {key}: {error['msg'].removeprefix('Value error, ')}"
    return f"{where}: {key}: {error['msg']} (got {error['input']!r})"


def _loc(error: Any) -> tuple[str, ...]:
    return tuple(str(part) for part in error["loc"])


def _suggestion(loc: tuple[str, ...]) -> str:
    model: type[BaseModel] = CadenceConfig
    for part in loc[:-1]:
        field = model.model_fields.get(part)
        annotation = field.annotation if field else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return ""
        model = annotation
    close = difflib.get_close_matches(loc[-1], list(model.model_fields), n=1)
    return (
        f" (did you mean `{close[0]}`?)"
        if close
        else f"; known keys: {', '.join(model.model_fields)}"
    )


def _nearest_line(lines: dict[tuple[str, ...], int], loc: tuple[str, ...]) -> int | None:
    for end in range(len(loc), 0, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def _key_lines(node: yaml.Node | None, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], int]:
    """Map each key path of a YAML document to its 1-based line."""
    found: dict[tuple[str, ...], int] = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            path = (*prefix, str(key_node.value))
            found[path] = key_node.start_mark.line + 1
            found.update(_key_lines(value_node, path))
    return found
