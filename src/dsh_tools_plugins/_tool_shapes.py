"""How a workspace tool is declared, once for all of them (``read_file``, ``list_dir``,
``glob``, ``grep``, ``write_file``, ``edit_file``): in a worker thread
(``blocking=True``, so a slow disk or a large tree never stalls an event loop), closed
to the outside world, read-only and idempotent unless it changes a file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from dsh_tools._context import ToolRunContext
from dsh_tools._define import define_tool
from dsh_tools._models import PresentableResult, ToolDefinition, ToolOutput
from dsh_tools._paths import ToolPaths
from dsh_tools.errors import ToolArgsError
from dsh_tools.presentation import ToolCallView, ToolResultView

__all__ = ["check_positive", "workspace_tool"]

A = TypeVar("A")
"""The arguments class of a tool built here."""

_READS = {"read_only": True, "idempotent": True, "open_world": False}
_CHANGES = {"read_only": False, "open_world": False}


def check_positive(name: str, value: int) -> None:
    """Refuse a count argument (``limit``, ``offset``) below 1, naming it."""
    if value < 1:
        raise ToolArgsError([f'"{name}" must be 1 or more, got {value}'])


def workspace_tool(
    *,
    name: str,
    description: str,
    parameters: type[A],
    execute: Callable[[A, ToolRunContext], Any],
    output: ToolOutput,
    present_call: Callable[[A], ToolCallView],
    present_result: Callable[[A, PresentableResult], ToolResultView | None],
    title: str,
    paths: ToolPaths,
    read_only: bool = True,
    preflight: Callable[[A | None], object] | None = None,
) -> ToolDefinition[A]:
    """A workspace tool; one that changes a file (``read_only=False``) has a
    ``preflight`` that refuses before anyone is asked."""
    return define_tool(
        name=name,
        description=description,
        parameters=parameters,
        execute=execute,
        output=output,
        present_call=present_call,
        present_result=present_result,
        metadata={**(_READS if read_only else _CHANGES), "title": title},
        paths=paths,
        blocking=True,
        preflight=preflight,
    )
