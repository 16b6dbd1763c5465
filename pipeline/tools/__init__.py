"""Tool calls: the functions an agent offers its model, and their running in a call
(docs/tools.md)."""

from cadence.pipeline.tools.builtins import BUILTIN_TOOLS, end_call, read_keypad
from cadence.pipeline.tools.context import ToolContext
from cadence.pipeline.tools.keypad import Keypad
from cadence.pipeline.tools.runner import ToolResult, ToolRunner
from cadence.pipeline.tools.selection import ToolSelectionError, offered_tools
from cadence.pipeline.tools.tool import (
    AskTheCaller,
    InvalidArgumentsError,
    Tool,
    ToolDefinitionError,
    tool,
)

__all__ = [
    "BUILTIN_TOOLS",
    "AskTheCaller",
    "InvalidArgumentsError",
    "Keypad",
    "Tool",
    "ToolContext",
    "ToolDefinitionError",
    "ToolResult",
    "ToolRunner",
    "ToolSelectionError",
    "end_call",
    "offered_tools",
    "read_keypad",
    "tool",
]
