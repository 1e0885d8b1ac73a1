"""Who is asked, and through what: only calls that can run reach a person, and a channel
is an ``ApprovalService`` or a plain callable (sync or async) taking the request."""

from __future__ import annotations

from typing import Any

import pytest

from approval_helpers import add_write_tool, code
from dsh_tools import (
    ApprovalOutcome,
    ApprovalRequest,
    Ask,
    Deny,
    RegistrationError,
    ToolExecutionInput,
    ToolRegistry,
    hookimpl,
)
from dsh_tools.testing import ScriptedApproval


class Decide:
    def __init__(self, decision: object) -> None:
        self.decision = decision

    @hookimpl
    def dsh_tools_pre_execute(self, execution: Any) -> Any:
        return self.decision


def make_registry(approval: Any, decision: object = None) -> tuple[ToolRegistry, list[str]]:
    registry = ToolRegistry(approval=approval)
    ran = add_write_tool(registry)
    registry.add_plugin(Decide(decision if decision is not None else Ask("writes files")))
    return registry, ran


def call(arguments: object = None, tool: str = "write") -> ToolExecutionInput:
    arguments = {"path": "a.txt"} if arguments is None else arguments
    return ToolExecutionInput("c1", tool, arguments, agent="coder")


# ------------------------------------------------------------------ runnable calls only


@pytest.mark.parametrize(
    ("tool", "arguments", "expected"),
    [
        ("nope", {"path": "a.txt"}, "UNKNOWN_TOOL"),
        ("write", {"path": 3}, "INVALID_ARGS"),
        ("write", {}, "INVALID_ARGS"),
    ],
)
def test_nobody_is_asked_about_a_call_that_cannot_run(
    tool: str, arguments: object, expected: str
) -> None:
    approval = ScriptedApproval()
    approval.answer("allowed-always")
    registry, ran = make_registry(approval)
    result = registry.execute_sync(call(arguments, tool))
    assert code(result) == expected
    assert "rejected" not in result.error.message
    assert approval.requests == []
    explained = registry.explain(call(arguments, tool))
    assert (explained.outcome, explained.code) == ("invalid", expected)
    assert explained.reason == result.error.message
    assert ran == []


def test_a_call_that_cannot_run_is_not_asked_even_without_a_service() -> None:
    registry, _ = make_registry(None)
    assert code(registry.execute_sync(call(tool="nope"))) == "UNKNOWN_TOOL"
    assert registry.explain(call(tool="nope")).code == "UNKNOWN_TOOL"


def test_a_deny_still_beats_unknown_tool() -> None:
    approval = ScriptedApproval()
    registry, _ = make_registry(approval, Deny("frozen"))
    result = registry.execute_sync(call(tool="nope"))
    assert (code(result), result.error.message) == ("DENIED", "frozen")
    explained = registry.explain(call(tool="nope"))
    assert (explained.outcome, explained.reason) == ("deny", "frozen")


def test_a_runnable_call_is_still_asked() -> None:
    approval = ScriptedApproval()
    approval.answer("allowed-once")
    registry, ran = make_registry(approval)
    assert code(registry.execute_sync(call())) == "ok"
    assert [request.tool_name for request in approval.requests] == ["write"]
    assert ran == ["a.txt"]


# ------------------------------------------------------------------ channels


def test_a_plain_function_is_a_channel() -> None:
    seen: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> str:
        seen.append(request)
        return "allowed-once"

    registry, ran = make_registry(approve)
    assert code(registry.execute_sync(call())) == "ok"
    assert [(request.agent, request.tool_name) for request in seen] == [("coder", "write")]
    assert ran == ["a.txt"]


def test_an_async_function_is_a_channel() -> None:
    import anyio

    async def approve(request: ApprovalRequest) -> ApprovalOutcome:
        await anyio.sleep(0)
        return ApprovalOutcome.REJECTED

    registry, ran = make_registry(approve)
    result = registry.execute_sync(call())
    assert (code(result), result.error.message) == ("DENIED", 'the user rejected tool "write"')
    assert code(anyio.run(registry.execute, call())) == "DENIED"
    assert ran == []


@pytest.mark.parametrize("channel", ["allowed-once", 3, object()], ids=["str", "int", "object"])
def test_anything_else_is_refused_when_the_registry_is_built(channel: object) -> None:
    expected = "approval must be an ApprovalService .* or a callable taking the ApprovalRequest"
    with pytest.raises(RegistrationError, match=expected):
        ToolRegistry(approval=channel)  # type: ignore[arg-type]
    registry = ToolRegistry()
    with pytest.raises(RegistrationError, match=expected):
        registry.approval = channel  # type: ignore[assignment]
    assert registry.approval is None
