"""Type-checked only (``mypy --strict``), never run: typed arguments, DSL parameters and
tools from functions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import attrs
from typing_extensions import assert_type

from dsh_tools import ToolDefinition, ToolRunContext, define_tool, tool_from_function
from dsh_tools import tool as dsh_tool
from dsh_tools._define import FunctionTool
from dsh_tools._json import FrozenDict
from dsh_tools._schema.arguments import ArgumentsModel, arguments_model


@attrs.frozen
class ReadArgs:
    path: str = attrs.field(metadata={"description": "Absolute path"})
    limit: Annotated[int, "Max lines"] = 100
    tags: tuple[str, ...] = ()


def read(raw: object) -> str:
    model = arguments_model(ReadArgs)
    assert_type(model, ArgumentsModel[ReadArgs])
    args = assert_type(model.parse(raw), ReadArgs)
    first: str | None = args.tags[0] if args.tags else None
    return f"{args.path}:{args.limit + 1}:{first}"


def untyped(raw: object) -> object:
    return arguments_model({"path": {"type": "string", "required": True}}).parse(raw)


def closed_root() -> None:
    # A DSL root written out as an object value spec, closed, type-checks like a property map.
    tool = define_tool(
        name="read",
        description="Read a file.",
        parameters={
            "type": "object",
            "properties": {"path": {"type": "string", "required": True}},
            "additionalProperties": False,
        },
        execute=lambda args, ctx: str(args["path"]),
    )
    assert_type(tool, ToolDefinition[FrozenDict])


@dsh_tool
def greet(name: str, ctx: ToolRunContext, excited: bool = False) -> str:
    """Greet someone."""
    return name


def shout(text: str) -> str:
    """Shout."""
    return text.upper()


def function_tools() -> None:
    # A tool from a function is a definition whose arguments arrive as a mapping.
    assert_type(greet, ToolDefinition[Mapping[str, Any]])
    assert_type(dsh_tool(name="loud", blocking=True)(shout), FunctionTool)
    assert_type(tool_from_function(shout, metadata={"read_only": True}), FunctionTool)
    assert_type(shout("a"), str)  # the plain form leaves the function as it was
