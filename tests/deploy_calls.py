"""A registry with one ``deploy`` tool that always asks, for the approval store tests:
``make_registry(store)`` gives the registry, its scripted approval service and the list
of services the body deployed."""

from __future__ import annotations

import itertools
from typing import Any

from approval_helpers import code
from dsh_tools import (
    Ask,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolRegistry,
    define_tool,
    hookimpl,
)
from dsh_tools.testing import ScriptedApproval

__all__ = ["AskAlways", "allowed_deploy", "code", "deploy", "make_registry"]


class AskAlways:
    @hookimpl
    def dsh_tools_pre_execute(self, execution: Any) -> Ask:
        return Ask("deploys")


def make_registry(store: Any) -> tuple[ToolRegistry, ScriptedApproval, list[str]]:
    approval = ScriptedApproval()
    registry = ToolRegistry(approval=approval, approval_store=store)
    ran: list[str] = []
    registry.register(
        define_tool(
            name="deploy",
            description="Deploy a service.",
            parameters={"service": {"type": "string", "required": True}},
            execute=lambda args, ctx: ran.append(args["service"]) or "deployed",
        )
    )
    registry.add_plugin(AskAlways())
    return registry, approval, ran


_CALL_IDS = itertools.count(1)


def deploy(service: str = "web", agent: str = "ops") -> ToolExecutionInput:
    """A new call of ``deploy`` (its own call id: a call id names one call, and the call
    journal of a durable store replays a repeat of one)."""
    return ToolExecutionInput(f"c{next(_CALL_IDS)}", "deploy", {"service": service}, agent=agent)


def allowed_deploy(store: Any) -> tuple[ToolExecutionResult, list[str]]:
    """One deploy call on a registry over ``store`` whose person allows it always: its
    result, and the services its body deployed."""
    registry, approval, ran = make_registry(store)
    approval.answer("allowed-always")
    return registry.execute_sync(deploy()), ran
