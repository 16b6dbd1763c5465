"""The tools every agent can offer without writing one (``tools.builtins``): ending the call,
and reading the keys the caller types."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from cadence.pipeline.tools.context import ToolContext
from cadence.pipeline.tools.tool import Tool, tool

KEYPAD_TIMEOUT_S = 20.0
"""How long ``read_keypad`` waits for the caller to finish typing."""


@tool(cancellable=False)
async def end_call(context: ToolContext) -> dict[str, str]:
    """End the phone call, once the caller's business is done or they ask to hang up. Say a
    short goodbye in the same reply before calling it: the call ends once the caller has heard
    it."""
    context.end_call()
    return {"status": "the call ends after your goodbye"}


@tool(timeout_ms=round(KEYPAD_TIMEOUT_S * 1000) + 1000)
async def read_keypad(
    context: ToolContext,
    max_digits: Annotated[int, Field(ge=1, le=32, description="most keys to read")] = 16,
) -> dict[str, str]:
    """Read digits the caller types on their phone's keypad (an account, order or card
    number), ending with the # key. Ask them to type the number first, in the same reply."""
    digits = await context.keypad.read(max_digits, until="#", timeout_s=KEYPAD_TIMEOUT_S)
    if not digits:
        return {"digits": "", "note": "no keys were pressed"}
    return {"digits": digits}


BUILTIN_TOOLS: dict[str, Tool] = {tool.name: tool for tool in (end_call, read_keypad)}
