"""``Ledger``: the services a test's agent called, with the arguments each ran with (after the
services' own grounding) and its result — what a caller's booking did, read from the services,
not from what the agent said."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from cadence.pipeline.tools import Tool
from cadence.pipeline.tools.context import ToolContext


@dataclass
class Ledger:
    """Every service call the agent made, with its arguments and result."""

    calls: list[tuple[str, dict[str, Any], dict[str, Any]]] = field(default_factory=list)

    def spy(self, tool: Tool) -> Tool:
        async def function(context: ToolContext, **arguments: Any) -> Any:
            result = json.loads(await tool.call(arguments, context))
            self.calls.append((tool.name, arguments, result))
            return result

        return Tool(
            function,
            tool.spec,
            tool.arguments,
            "context",
            tool.cancellable,
            tool.read_only,
            tool.timeout_ms,
        )

    def found_names(self) -> set[str]:
        return {
            row["restaurant_name"]
            for name, _, result in self.calls
            if name == "FindRestaurants"
            for row in result.get("results", [])
        }

    def booked(self) -> list[dict[str, Any]]:
        return [
            row
            for name, _, result in self.calls
            if name == "ReserveRestaurant"
            for row in result.get("results", [])
        ]
