"""``Tool``: an async Python function the agent can call in the middle of a call — its name,
description and JSON schema derived from its signature, its arguments validated before it runs.

::

    @tool
    async def find_table(restaurant: str, party_size: Annotated[int, Field(ge=1, le=20)],
                         time: str) -> dict[str, object]:
        '''Find a free table at a restaurant for a party at a time ("19:30").'''
        ...

    agent = Agent(config, tools=[find_table])

The docstring is the description the model reads; each parameter's type (with pydantic's
``Field`` constraints and descriptions, through ``Annotated``) becomes its schema, and a
parameter without a default is required. A parameter annotated ``ToolContext`` is not the
model's to fill: the runtime hands in the call's context (the keypad, ending the call). The
result may be anything pydantic serializes to JSON (a dict, a list, a model, a dataclass,
a string); it goes back to the model as JSON.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic_core import to_json

from cadence.llm.tools import ToolSpec
from cadence.pipeline.tools.context import ToolContext

NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""What chat-completions services accept as a function's name."""

ToolFunction = Callable[..., Awaitable[Any]]


class ToolDefinitionError(TypeError):
    """A function that cannot be a tool (not async, a parameter without a type, a bad name)."""


class AskTheCaller(Exception):  # noqa: N818 (not an error: what the reply says next)
    """Raised by a tool whose call needs what only the caller can say (a required argument
    nobody gave): the reply asks ``question`` instead of going back to the model, and the
    call waits for the answer (docs/tools.md, "A call the caller must complete")."""

    def __init__(self, question: str) -> None:
        super().__init__(question)
        self.question = question


class InvalidArgumentsError(ValueError):
    """The model's arguments for a call are not JSON, or not what the tool's parameters take;
    the message says what, in words the model can correct."""


@dataclass(frozen=True)
class Tool:
    """A function the agent can call. Build one with :func:`tool`."""

    function: ToolFunction
    spec: ToolSpec
    arguments: type[BaseModel]
    """The parameters the model fills, as a model that validates its arguments."""
    context_parameter: str | None
    """The parameter that receives the ``ToolContext``, if the function takes one."""
    cancellable: bool
    """A barge-in cancels the call; otherwise it finishes in the background."""
    read_only: bool
    """The tool only looks things up: it may run for a reply generated before the caller's
    turn is committed (speculatively), and a reply thrown away cost nothing but the time. A
    tool that acts (books, pays, hangs up) runs only once the turn is committed."""
    timeout_ms: int | None
    """Its own time limit; ``None``: the configuration's ``tools.timeout_ms``."""

    @property
    def name(self) -> str:
        return self.spec.name

    def validate(self, arguments: str) -> dict[str, Any]:
        """The call's keyword arguments from the model's JSON text."""
        text = arguments.strip() or "{}"
        try:
            parsed = self.arguments.model_validate_json(text)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, error['loc'])) or 'arguments'}: {error['msg']}"
                for error in exc.errors(include_url=False)
            )
            raise InvalidArgumentsError(problems) from None
        return {name: getattr(parsed, name) for name in type(parsed).model_fields}

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> str:
        """Run the function; its result as JSON text."""
        if self.context_parameter is not None:
            arguments = {**arguments, self.context_parameter: context}
        return to_json(await self.function(**arguments)).decode()


@overload
def tool(function: ToolFunction, /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    cancellable: bool = True,
    read_only: bool = False,
    timeout_ms: int | None = None,
) -> Callable[[ToolFunction], Tool]: ...


def tool(
    function: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    cancellable: bool = True,
    read_only: bool = False,
    timeout_ms: int | None = None,
) -> Tool | Callable[[ToolFunction], Tool]:
    """Make ``function`` a tool: ``@tool``, or ``@tool(read_only=True, …)``. ``name`` defaults
    to the function's, ``description`` to its docstring."""

    def make(function: ToolFunction) -> Tool:
        return _build(function, name, description, cancellable, read_only, timeout_ms)

    return make(function) if function is not None else make


def _build(
    function: ToolFunction,
    name: str | None,
    description: str | None,
    cancellable: bool,
    read_only: bool,
    timeout_ms: int | None,
) -> Tool:
    name = name or function.__name__
    where = f"tool {name!r} ({function.__module__}.{function.__qualname__})"
    if not NAME.fullmatch(name):
        raise ToolDefinitionError(f"{where}: a name is 1–64 letters, digits, _ or -")
    if not inspect.iscoroutinefunction(function):
        raise ToolDefinitionError(f"{where}: a tool is an async function")
    if timeout_ms is not None and timeout_ms <= 0:
        raise ToolDefinitionError(f"{where}: timeout_ms must be positive")
    text = " ".join((description if description is not None else function.__doc__ or "").split())
    if not text:
        raise ToolDefinitionError(f"{where}: the model needs a description (a docstring)")
    hints = get_type_hints(function, include_extras=True)
    fields: dict[str, Any] = {}
    context_parameter = None
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ToolDefinitionError(f"{where}: *args and **kwargs have no schema")
        if parameter.name not in hints:
            raise ToolDefinitionError(f"{where}: parameter {parameter.name!r} needs a type")
        if hints[parameter.name] is ToolContext:
            context_parameter = parameter.name
            continue
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (hints[parameter.name], default)
    return tool_from_fields(
        function, name, text, fields, context_parameter,
        cancellable=cancellable, read_only=read_only, timeout_ms=timeout_ms,
    )  # fmt: skip


def tool_from_fields(
    function: ToolFunction,
    name: str,
    description: str,
    fields: dict[str, Any],
    context_parameter: str | None = None,
    *,
    cancellable: bool = True,
    read_only: bool = False,
    timeout_ms: int | None = None,
) -> Tool:
    """A tool whose parameters are given as pydantic ``fields`` (name → ``(type, default)``
    or ``(Annotated[type, Field(…)], default)``) rather than read off a signature: for
    tools made from data, such as a service's schema. ``@tool`` ends here too."""
    arguments = create_model(
        f"{name}_arguments",
        __config__=ConfigDict(extra="forbid"),
        **fields,
    )
    schema = arguments.model_json_schema()
    schema.pop("title", None)
    for field in schema.get("properties", {}).values():
        field.pop("title", None)
    return Tool(
        function=function,
        spec=ToolSpec(name=name, description=description, parameters=schema),
        arguments=arguments,
        context_parameter=context_parameter,
        cancellable=cancellable,
        read_only=read_only,
        timeout_ms=timeout_ms,
    )
