"""What the approval tests share: a ``write`` tool that notes the paths it wrote."""

from __future__ import annotations

from typing import Any

from dsh_tools import ToolRegistry, define_tool


def add_write_tool(registry: ToolRegistry) -> list[str]:
    """Register ``write(path)``; the list it returns grows by each path its body wrote."""
    ran: list[str] = []
    registry.register(
        define_tool(
            name="write",
            description="Write a file.",
            parameters={"path": {"type": "string", "required": True}},
            execute=lambda args, ctx: ran.append(args["path"]) or "written",
        )
    )
    return ran


def code(result: Any) -> str:
    """A result's code, ``ok`` for a success."""
    return result.error.info.code if result.is_error else "ok"
