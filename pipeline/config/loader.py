"""Load a YAML configuration into ``CadenceConfig`` with errors a person can act on.

A bad file yields one line per problem: ``file:line: key.path: what was expected (got …)``.

YAML aliases let a few lines stand for a structure of exponential size (the "billion laughs");
``yaml.safe_load`` builds it by reference, cheaply, but everything that then walks it — the
key lines, the validation, an error message quoting the input — would not finish. So a
document is measured as it would be expanded (in time linear in its text) and refused past
``MAX_EXPANDED_NODES``, and so is one that contains itself or nests past Python's recursion.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from cadence.pipeline.config.schema import CadenceConfig


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
    except UnicodeDecodeError as exc:
        raise ConfigError(
            path, [f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"]
        ) from exc
    try:
        document = yaml.compose(text)
        _check_expansion(path, document)
        data = yaml.safe_load(text)
        lines = _key_lines(document)
    except RecursionError:
        raise ConfigError(path, [f"{path}: nested too deeply"]) from None
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


MAX_EXPANDED_NODES = 100_000
"""Far above any real configuration (the whole default one is about 150 values)."""


def _check_expansion(path: Path, document: yaml.Node | None) -> None:
    """Refuse a document that contains itself, or expands through its aliases to more than
    ``MAX_EXPANDED_NODES`` values. Each distinct node is visited once (depth first, without
    recursion), its expanded size computed from its children's."""
    if document is None:
        return
    sizes: dict[int, int] = {}
    open_nodes = {id(document)}
    stack = [(document, iter(_children(document)))]
    while stack:
        node, children = stack[-1]
        child = next(children, None)
        if child is None:
            sizes[id(node)] = 1 + sum(sizes[id(c)] for c in _children(node))
            open_nodes.discard(id(node))
            stack.pop()
        elif id(child) in open_nodes:
            line = child.start_mark.line + 1
            raise ConfigError(path, [f"{path}:{line}: an alias that contains itself"])
        elif id(child) not in sizes:
            open_nodes.add(id(child))
            stack.append((child, iter(_children(child))))
    if (size := sizes[id(document)]) > MAX_EXPANDED_NODES:
        raise ConfigError(
            path,
            [
                f"{path}: its aliases expand it to {size:,} values, over {MAX_EXPANDED_NODES:,} "
                "(a YAML bomb?)"
            ],
        )


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


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
