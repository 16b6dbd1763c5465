"""Which tools a session offers its model: the agent's own that the configuration enables
(``tools.enabled``), the offline SGD services it names (``tools.services``) and the built-ins
(``tools.builtins``)."""

from __future__ import annotations

from collections.abc import Sequence

from cadence.pipeline.config import ToolsConfig
from cadence.pipeline.tools.builtins import BUILTIN_TOOLS
from cadence.pipeline.tools.sgd_services import ServiceUnavailableError, sgd_service_tools
from cadence.pipeline.tools.tool import Tool


class ToolSelectionError(ValueError):
    """The configuration names a tool the agent does not have, or two tools share a name."""


def offered_tools(own: Sequence[Tool], config: ToolsConfig) -> list[Tool]:
    """The tools of a session under ``config`` (a configuration or one of its overlays)."""
    by_name: dict[str, Tool] = {}
    for tool in own:
        if tool.name in by_name or tool.name in BUILTIN_TOOLS:
            raise ToolSelectionError(f"two tools are named {tool.name!r}")
        by_name[tool.name] = tool
    enabled = list(by_name) if config.enabled is None else config.enabled
    unknown = [name for name in enabled if name not in by_name]
    if unknown:
        have = ", ".join(by_name) or "none"
        raise ToolSelectionError(
            f"tools.enabled: the agent has no tool named {', '.join(map(repr, unknown))} "
            f"(its tools: {have})"
        )
    try:
        services = sgd_service_tools(config.services)
    except ServiceUnavailableError as exc:
        raise ToolSelectionError(str(exc)) from None
    clashes = sorted({t.name for t in services} & (set(enabled) | set(config.builtins)))
    if clashes:
        raise ToolSelectionError(f"two tools are named {', '.join(map(repr, clashes))}")
    return [
        *(by_name[name] for name in enabled),
        *services,
        *(BUILTIN_TOOLS[name] for name in config.builtins),
    ]
