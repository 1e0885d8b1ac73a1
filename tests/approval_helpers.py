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


HIDING = {"notes": "n" * 5000, "target": "production"}
"""Arguments in the order a model picked to hide the short one behind a long one."""


def add_deploy_tool(registry: ToolRegistry) -> None:
    """Register ``deploy(notes, target)``, a tool without a card of its own."""
    registry.register(
        define_tool(
            name="deploy",
            description="Deploy.",
            parameters={
                "notes": {"type": "string", "required": True},
                "target": {"type": "string", "required": True},
            },
            execute=lambda args, ctx: "deployed",
        )
    )


def ask_every_call(registry: ToolRegistry) -> None:
    """Add a policy that asks a person before every call of ``registry``."""
    from dsh_tools import Ask, hookimpl

    class AskEveryCall:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: Any) -> Ask:
            return Ask("deploys")

    registry.add_plugin(AskEveryCall(), name="ask-every-call")


def assert_every_argument_shown(text: str) -> None:
    """Every argument of :data:`HIDING` is in ``text``: the long one folded, saying how
    much it left out, the short one whole."""
    assert 'target: "production"' in text
    assert "notes: " in text
    assert "(4,600 more characters not shown)" in text
