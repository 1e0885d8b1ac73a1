"""registry.explain: a policy dry run that says run / deny / ask / invalid, and does nothing."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh_tools import Ask, Deny, ToolRegistry, hookimpl
from dsh_tools._define import define_tool
from dsh_tools._models import ToolExecution, ToolExecutionInput
from dsh_tools.testing import CallRecorder, ScriptedApproval, assert_failure
from dsh_tools_plugins.audit import AuditLog
from dsh_tools_plugins.permissions import PermissionRules


def echo(ran: list[str]) -> Any:
    def body(arguments: Any, context: Any) -> str:
        ran.append(arguments["text"])
        return str(arguments["text"])

    return define_tool(
        name="echo",
        description="Echo text.",
        parameters={"text": {"type": "string", "required": True}},
        execute=body,
    )


def call(arguments: object = None, name: str = "echo") -> ToolExecutionInput:
    return ToolExecutionInput("c-1", name, {"text": "hi"} if arguments is None else arguments)


class Everything:
    """A plugin on every stage that notes what ran, and what dry_run it saw."""

    def __init__(self, decision: object = None) -> None:
        self.decision = decision
        self.seen: list[tuple[str, bool]] = []

    @hookimpl
    def dsh_tools_pre_execute(self, execution: ToolExecution) -> Any:
        self.seen.append(("pre_execute", execution.dry_run))
        return self.decision

    @hookimpl
    def dsh_tools_guard(self, execution: ToolExecution) -> None:
        self.seen.append(("guard", execution.dry_run))

    @hookimpl(wrapper=True)
    def dsh_tools_execute(self, execution: ToolExecution) -> Any:
        self.seen.append(("execute", execution.dry_run))
        return (yield)

    @hookimpl
    def dsh_tools_post_execute(self, execution: ToolExecution) -> None:
        self.seen.append(("post_execute", execution.dry_run))

    @hookimpl
    def dsh_tools_result(self, execution: ToolExecution) -> None:
        self.seen.append(("result", execution.dry_run))


def test_a_call_that_would_run_runs_nothing_but_policy() -> None:
    ran: list[str] = []
    recorder = CallRecorder()
    approval = ScriptedApproval()
    registry = ToolRegistry(tracer=recorder, approval=approval)
    registry.register(echo(ran))
    plugin = Everything(Ask("sure?"))
    registry.add_plugin(plugin, name="everything")

    explained = registry.scope("agent").explain(call())

    assert explained.outcome == "ask"
    assert explained.reason == "sure?"
    assert explained.if_approved is not None
    assert explained.if_approved.outcome == "run"
    assert plugin.seen == [("pre_execute", True), ("guard", True)]
    assert ran == []
    assert approval.requests == []
    assert recorder.calls == []


def test_deny_names_the_plugin_and_the_permission_rule(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(
        textwrap.dedent(
            """\
            default = "allow"

            [[rule]]
            action = "deny"
            tool = "echo"
            argument_equals = {text = "secret"}
            reason = "no secrets"
            """
        )
    )
    registry = ToolRegistry()
    registry.register(echo([]))
    registry.add_plugin(PermissionRules.from_toml(rules), name="permissions")

    explained = registry.explain(call({"text": "secret"}))

    assert (explained.outcome, explained.code) == ("deny", "DENIED")
    assert explained.reason is not None
    assert explained.reason.startswith("no secrets")
    step = explained.decided_by
    assert step is not None
    assert (step.stage, step.source) == ("pre_execute", "permissions")
    assert step.detail is not None
    assert step.detail["rule"] == {
        "index": 1,
        "name": None,
        "action": "deny",
        "file": str(rules),
        "line": 3,
        "text": '[[rule]]\naction = "deny"\ntool = "echo"\n'
        'argument_equals = {text = "secret"}\nreason = "no secrets"',
    }
    assert registry.explain(call({"text": "fine"})).outcome == "run"


def test_ask_says_what_the_guards_would_do_after_an_approval() -> None:
    registry = ToolRegistry(approval=ScriptedApproval())
    registry.register(echo([]))
    registry.add_plugin(Everything(Ask("a person decides")))
    registry.guard(lambda execution: None)

    explained = registry.scope("agent").explain(call())

    assert explained.outcome == "ask"
    after = explained.if_approved
    assert after is not None
    assert after.outcome == "run"
    assert [step.stage for step in after.steps][-1] == "guard"
    assert explained.lines()[-1] == "if approved: would run"


def test_an_ask_a_guard_would_deny_is_denied_without_asking() -> None:
    registry = ToolRegistry(approval=ScriptedApproval())
    registry.register(echo([]))
    registry.add_plugin(Everything(Ask("a person decides")))
    registry.guard(lambda execution: "not on Fridays")

    explained = registry.scope("agent").explain(call())
    result = registry.scope("agent").execute_sync(call())

    assert (explained.outcome, explained.reason, explained.code) == (
        "deny",
        "not on Fridays",
        "DENIED",
    )
    assert explained.if_approved is None
    assert explained.decided_by is not None
    assert explained.decided_by.stage == "guard"
    assert assert_failure(result, "DENIED").error.message == "not on Fridays"


def test_an_ask_nobody_can_answer_is_a_denial_as_in_a_real_call() -> None:
    registry = ToolRegistry()  # no approval service
    registry.register(echo([]))
    registry.add_plugin(Everything(Ask("a person decides")))

    explained = registry.explain(call())
    result = registry.execute_sync(call())

    assert (explained.outcome, explained.reason) == ("deny", "a person decides")
    assert explained.reason == assert_failure(result, "DENIED").error.message


@pytest.mark.parametrize(
    ("tool", "arguments", "code"),
    [
        ("echo", {"text": 3}, "INVALID_ARGS"),
        ("missing", {}, "UNKNOWN_TOOL"),
        ("echo", {"text": float("nan")}, "INVALID_JSON"),
    ],
)
def test_invalid_calls_say_why(tool: str, arguments: object, code: str) -> None:
    registry = ToolRegistry()
    registry.register(echo([]))

    explained = registry.explain(call(arguments, tool))

    assert (explained.outcome, explained.code) == ("invalid", code)
    real = assert_failure(registry.execute_sync(call(arguments, tool)), code)
    assert explained.reason == real.error.message


def test_a_raising_policy_is_a_denial_with_its_code() -> None:
    class Broken:
        @hookimpl
        def dsh_tools_pre_execute(self) -> None:
            raise RuntimeError("policy bug")

    registry = ToolRegistry()
    registry.register(echo([]))
    registry.add_plugin(Broken(), name="broken")

    explained = registry.explain(call())

    assert (explained.outcome, explained.code) == ("deny", "POLICY_ERROR")
    assert explained.decided_by is not None
    assert (explained.decided_by.source, explained.decided_by.decision) == ("broken", "raised")


def test_explain_writes_nothing_to_the_audit_log(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    registry = ToolRegistry()
    registry.register(echo([]))
    registry.add_plugin(AuditLog(path))
    registry.guard(
        lambda execution: "no" if (execution.arguments or {}).get("text") == "no" else None
    )

    assert registry.explain(call()).outcome == "run"
    assert registry.explain(call({"text": "no"})).outcome == "deny"
    assert not path.exists()

    registry.execute_sync(call())
    assert path.read_text(encoding="utf-8").count("\n") == 2


def test_scopes_explain_with_their_own_plugins_and_async_hosts_can_await_it() -> None:
    registry = ToolRegistry()
    registry.register(echo([]))
    registry.scope("locked").add_plugin(Everything(Deny("locked scope")))

    assert registry.explain(call()).outcome == "run"
    assert registry.scope("locked").explain(call()).reason == "locked scope"

    async def main() -> str:
        with pytest.raises(RuntimeError):
            registry.explain(call())
        return (await registry.scope("locked").explain_async(call())).outcome

    assert anyio.run(main) == "deny"


def test_a_remembered_answer_decides_as_it_would_for_the_call() -> None:
    approval = ScriptedApproval()
    registry = ToolRegistry(approval=approval)
    registry.register(echo([]))
    registry.add_plugin(Everything(Ask("a person decides")))
    agent = registry.scope("agent")
    approval.answer("allowed-always", "rejected-always")

    agent.execute_sync(call({"text": "fine"}))
    agent.execute_sync(call({"text": "never"}))

    assert agent.explain(call({"text": "fine"})).outcome == "run"
    refused = agent.explain(call({"text": "never"}))
    assert (refused.outcome, refused.reason) == (
        "deny",
        'the user rejected tool "echo" (a remembered answer)',
    )
    assert refused.decided_by is not None
    assert refused.decided_by.source == "approval store"
    assert agent.explain(call({"text": "new"})).outcome == "ask"
    assert len(approval.requests) == 2


def test_arguments_code_that_raises_a_base_exception_is_contained_as_in_a_real_call() -> None:
    import attrs

    def refuse(instance: object, attribute: object, value: object) -> None:
        raise SystemExit("a validator that exits")

    @attrs.frozen
    class Args:
        n: int = attrs.field(validator=refuse)

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="exits",
            description="Refuses every argument by exiting.",
            parameters=Args,
            execute=lambda args, context: "ran",
        )
    )
    explained = registry.explain(ToolExecutionInput("1", "exits", {"n": 1}))
    real = registry.execute_sync(ToolExecutionInput("2", "exits", {"n": 1}))
    assert real.is_error
    assert explained.outcome == "invalid"
    assert "a validator that exits" in (explained.reason or "")
