"""Pipeline stages 1 and 2: pre-execute decisions, approval (``Ask``) and guards.

Behaviors B057-B081 of ``/work/shared/spec/behaviors.md``. Denials carry code ``DENIED``
(upstream leaves them uncoded); a raising or malformed policy stage ``POLICY_ERROR``.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from dsh_tools._define import define_tool
from dsh_tools._models import (
    Accept,
    Allow,
    ApprovalOutcome,
    ApprovalRequest,
    Ask,
    Deny,
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionInput,
    ToolExecutionResult,
)
from dsh_tools._registry import ToolRegistry
from dsh_tools.errors import ToolError
from dsh_tools.hookspecs import hookimpl


def text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def echo_registry(log: list[str], **options: Any) -> ToolRegistry:
    registry = ToolRegistry(**options)

    def body(args: Any, ctx: Any) -> str:
        log.append("body")
        return str(args["text"])

    registry.register(
        define_tool(
            name="echo",
            description="Echo the text.",
            parameters={"text": {"type": "string", "required": True}},
            execute=body,
        )
    )
    return registry


def call(name: str = "echo", agent: str | None = None) -> ToolExecutionInput:
    return ToolExecutionInput(call_id="call-1", name=name, arguments={"text": "hi"}, agent=agent)


def failure(result: ToolExecutionResult) -> ToolExecutionFailure:
    assert isinstance(result, ToolExecutionFailure), result
    return result


class Recorder:
    """Post-execute and result hooks that log what they saw."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.results: list[ToolExecutionResult] = []

    @hookimpl
    def dsh_tools_post_execute(self, result: ToolExecutionResult) -> None:
        self.log.append("post")

    @hookimpl
    def dsh_tools_result(self, result: ToolExecutionResult) -> None:
        self.log.append("result")
        self.results.append(result)


# ------------------------------------------------------------------ pre-execute


def test_pre_execute_none_everywhere_allows_the_call() -> None:
    # B057: the innermost decision is allow.
    log: list[str] = []
    registry = echo_registry(log)

    class Abstain:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> None:
            log.append("pre")

    registry.add_plugin(Abstain())
    result = registry.execute_sync(call())
    assert not result.is_error
    assert log == ["pre", "body"]


def test_pre_execute_first_decision_wins_and_later_impls_are_not_called() -> None:
    # B057: plugins added later run first (pluggy order); a decision short-circuits.
    log: list[str] = []
    registry = echo_registry(log)

    class First:
        @hookimpl
        def dsh_tools_pre_execute(self) -> None:
            log.append("first")

    class Second:
        @hookimpl
        def dsh_tools_pre_execute(self) -> Deny:
            log.append("second")
            return Deny("second says no")

    class Third:
        @hookimpl
        def dsh_tools_pre_execute(self) -> None:
            log.append("third")

    registry.add_plugin(First())
    registry.add_plugin(Second())
    registry.add_plugin(Third())
    result = failure(registry.execute_sync(call()))
    assert log == ["third", "second"]
    assert result.error.message == "second says no"


def test_pre_execute_tryfirst_runs_before_later_registrations() -> None:
    # B057: pluggy's tryfirst is honoured by the pipeline's own loop.
    log: list[str] = []
    registry = echo_registry(log)

    class Early:
        @hookimpl(tryfirst=True)
        def dsh_tools_pre_execute(self) -> Deny:
            log.append("early")
            return Deny("early")

    class Late:
        @hookimpl
        def dsh_tools_pre_execute(self) -> Allow:
            log.append("late")
            return Allow()

    registry.add_plugin(Early())
    registry.add_plugin(Late())
    assert failure(registry.execute_sync(call())).error.message == "early"
    assert log == ["early"]


@pytest.mark.anyio
async def test_async_pre_execute_abstaining_does_not_win_over_a_later_deny() -> None:
    # B057 + design.md pitfall: an async impl's coroutine is awaited, not taken as a decision.
    log: list[str] = []
    registry = echo_registry(log)

    class Denier:
        @hookimpl
        async def dsh_tools_pre_execute(self) -> Deny:
            await anyio.sleep(0)
            return Deny("async deny")

    class Abstainer:
        @hookimpl
        async def dsh_tools_pre_execute(self) -> None:
            await anyio.sleep(0)
            log.append("abstained")

    registry.add_plugin(Denier())
    registry.add_plugin(Abstainer())
    result = failure(await registry.execute(call()))
    assert log == ["abstained"]
    assert result.error.message == "async deny"
    assert result.code == "DENIED"


def test_deny_fails_with_reason_and_skips_wrappers_and_body() -> None:
    # B058, B094: a denied call never enters dsh_tools_execute.
    log: list[str] = []
    registry = echo_registry(log)

    class Policy:
        @hookimpl
        def dsh_tools_pre_execute(self) -> Deny:
            return Deny("not today")

        @hookimpl(wrapper=True)
        def dsh_tools_execute(self) -> Any:
            log.append("wrapper")
            return (yield)

    registry.add_plugin(Policy())
    result = failure(registry.execute_sync(call()))
    assert result.error.message == "not today"
    assert result.content == [text("Error: not today")]
    assert (result.error.info.name, result.code) == ("PolicyDenied", "DENIED")
    assert log == []


def test_denial_still_passes_post_execute_finalize_and_observers() -> None:
    # B059: pre-execute denial takes the post path and post sees a frozen failure.
    log: list[str] = []
    registry = echo_registry(log)
    seen: list[ToolExecutionResult] = []

    class Policy(Recorder):
        @hookimpl
        def dsh_tools_pre_execute(self) -> Deny:
            return Deny("no")

        @hookimpl
        def dsh_tools_post_execute(self, result: ToolExecutionResult) -> None:
            seen.append(result)
            log.append("post")

    registry.add_plugin(Policy(log))
    registry.execute_sync(call())
    assert log == ["post", "result"]
    assert seen[0].is_error
    with pytest.raises(TypeError):
        seen[0].content[0]["text"] = "changed"  # type: ignore[index]


def test_pre_execute_sees_frozen_arguments_and_cannot_rewrite_them() -> None:
    # B060: there is no rewrite decision; arguments are frozen.
    log: list[str] = []
    registry = echo_registry(log)
    errors: list[Exception] = []

    class Rewriter:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> None:
            try:
                execution.arguments["text"] = "rewritten"  # type: ignore[index]
            except TypeError as error:
                errors.append(error)

    registry.add_plugin(Rewriter())
    result = registry.execute_sync(call())
    assert result.value == "hi"
    assert len(errors) == 1


def test_raising_pre_execute_fails_closed_on_the_final_path() -> None:
    # B061: POLICY_ERROR; guards, body and post-execute skipped; observers still run.
    log: list[str] = []
    registry = echo_registry(log)
    registry.guard(lambda execution: log.append("guard"))  # type: ignore[func-returns-value]

    class Broken(Recorder):
        @hookimpl
        def dsh_tools_pre_execute(self) -> None:
            raise RuntimeError("policy store offline")

    registry.add_plugin(Broken(log))
    result = failure(registry.execute_sync(call()))
    assert result.code == "POLICY_ERROR"
    assert "policy store offline" in result.error.message
    assert result.content == [text(f"Error: {result.error.message}")]
    assert log == ["result"]


def test_pre_execute_raising_a_coded_error_is_a_policy_fault_naming_its_code() -> None:
    # B061 keeps the raised name; the code is the policy fault's (issue 16: a raising
    # policy must not pass for a retryable or argument error), the raised one in the text.
    registry = echo_registry([])

    class Coded:
        @hookimpl
        def dsh_tools_pre_execute(self) -> None:
            raise ToolError("quota exhausted", code="QUOTA")

    registry.add_plugin(Coded())
    result = failure(registry.execute_sync(call()))
    assert (result.error.info.name, result.code) == ("ToolError", "POLICY_ERROR")
    assert "quota exhausted" in result.error.message
    assert "QUOTA" in result.error.message


def test_pre_execute_returning_a_non_decision_fails_closed() -> None:
    # Python port: a malformed decision is a POLICY_ERROR, never an accidental allow.
    log: list[str] = []
    registry = echo_registry(log)

    class Sloppy:
        @hookimpl
        def dsh_tools_pre_execute(self) -> str:
            return "deny"

    registry.add_plugin(Sloppy())
    result = failure(registry.execute_sync(call()))
    assert result.code == "POLICY_ERROR"
    assert "'deny'" in result.error.message
    assert log == []


def test_unknown_tool_still_reaches_pre_execute_and_guards() -> None:
    # B062, B079: policy sees every name; without a deny dispatch yields UNKNOWN_TOOL.
    seen: list[str] = []
    registry = ToolRegistry()
    registry.guard(lambda execution: seen.append(f"guard:{execution.name}"))  # type: ignore[func-returns-value]

    class Watcher:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> None:
            seen.append(f"pre:{execution.name}")

    registry.add_plugin(Watcher())
    result = failure(registry.execute_sync(call("ghost")))
    assert seen == ["pre:ghost", "guard:ghost"]
    assert result.code == "UNKNOWN_TOOL"
    assert result.error.message == 'unknown tool "ghost"'


def test_deny_beats_unknown_tool() -> None:
    # B062
    registry = ToolRegistry()

    class Denier:
        @hookimpl
        def dsh_tools_pre_execute(self) -> Deny:
            return Deny("nope")

    registry.add_plugin(Denier())
    result = failure(registry.execute_sync(call("ghost")))
    assert (result.code, result.error.message) == ("DENIED", "nope")


def test_scoped_pre_execute_sees_only_its_agents_calls() -> None:
    # B063: scoped listeners see their agent (and descendants); global ones see all.
    registry = echo_registry([])
    scoped: list[str | None] = []
    everywhere: list[str | None] = []

    class Scoped:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> None:
            scoped.append(execution.agent)

    class Global:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> None:
            everywhere.append(execution.agent)

    registry.scope("a").add_plugin(Scoped())
    registry.add_plugin(Global())
    registry.execute_sync(call())
    registry.scope("a").execute_sync(call())
    registry.scope("b").execute_sync(call())
    registry.scope("a").scope("sub").execute_sync(call())
    assert scoped == ["a", "a/sub"]
    assert everywhere == [None, "a", "b", "a/sub"]


# ------------------------------------------------------------------ ask


class AskPolicy:
    def __init__(self, reason: str | None = None) -> None:
        self.reason = reason

    @hookimpl
    def dsh_tools_pre_execute(self) -> Ask:
        return Ask(self.reason)


class Service:
    def __init__(self, outcome: object) -> None:
        self.outcome = outcome
        self.requests: list[ApprovalRequest] = []

    def request(self, request: ApprovalRequest) -> Any:
        self.requests.append(request)
        return self.outcome


def test_ask_without_a_service_denies_with_the_ask_reason() -> None:
    # B064
    log: list[str] = []
    registry = echo_registry(log)
    registry.add_plugin(AskPolicy("commands need a person"))
    result = failure(registry.execute_sync(call(agent="a")))
    assert (result.code, result.error.message) == ("DENIED", "commands need a person")
    assert log == []


def test_ask_without_a_service_or_reason_names_the_tool() -> None:
    # B064 (our wording: "no approval service is configured" for upstream's "not yet supported")
    registry = echo_registry([])
    registry.add_plugin(AskPolicy())
    result = failure(registry.execute_sync(call(agent="a")))
    assert result.code == "DENIED"
    assert result.error.message.startswith('tool "echo" requires approval')


def test_ask_without_an_agent_denies_without_consulting_the_service() -> None:
    # B065: the ask reason is ignored; the service never hears about it.
    service = Service(ApprovalOutcome.ALLOWED_ONCE)
    log: list[str] = []
    registry = echo_registry(log, approval=service)
    registry.add_plugin(AskPolicy("because"))
    result = failure(registry.execute_sync(call()))
    assert result.error.message == (
        'tool "echo" requires approval, but the call has no agent to route it through'
    )
    assert service.requests == []
    assert log == []


def test_ask_allowed_once_runs_guards_then_the_body() -> None:
    # B066: one request with agent, tool, call id, reason and the caller's signal.
    service = Service("allowed-once")
    log: list[str] = []
    registry = echo_registry(log, approval=service)
    registry.guard(lambda execution: log.append(f"guard dry_run={execution.dry_run}"))  # type: ignore[func-returns-value]
    registry.add_plugin(AskPolicy("why"))
    result = registry.execute_sync(call(agent="a"))
    assert not result.is_error
    # A dry look before the person is asked (never waste a yes), then the real one.
    assert log == ["guard dry_run=True", "guard dry_run=False", "body"]
    [request] = service.requests
    assert (request.agent, request.tool_name, request.call_id, request.reason) == (
        "a",
        "echo",
        "call-1",
        "why",
    )
    assert request.arguments == {"text": "hi"}
    assert request.signal is None


def test_ask_allowed_once_still_loses_to_a_guard() -> None:
    # B066, B074
    registry = echo_registry([], approval=Service("allowed-once"))
    registry.guard(lambda execution: "guarded")
    registry.add_plugin(AskPolicy())
    assert failure(registry.execute_sync(call(agent="a"))).error.message == "guarded"


def test_a_guard_that_would_deny_is_heard_before_anyone_is_asked() -> None:
    service = Service("allowed-once")
    registry = echo_registry([], approval=service)
    registry.guard(lambda execution: "guarded")
    registry.add_plugin(AskPolicy())
    denied = failure(registry.execute_sync(call(agent="a")))
    assert (denied.code, denied.error.message) == ("DENIED", "guarded")
    assert service.requests == []


@pytest.mark.parametrize(
    ("outcome", "message"),
    [
        ("rejected", 'the user rejected tool "echo"'),
        ("cancelled", 'approval for tool "echo" was cancelled'),
        ("unavailable", 'tool "echo" requires approval, but no approval channel is available'),
    ],
)
def test_ask_outcomes_other_than_allowed_once_deny(outcome: str, message: str) -> None:
    # B067, B068, B069: denials on the post path, body never runs.
    log: list[str] = []
    registry = echo_registry(log, approval=Service(outcome))
    registry.add_plugin(AskPolicy())
    registry.add_plugin(Recorder(log))
    result = failure(registry.execute_sync(call(agent="a")))
    assert (result.code, result.error.message) == ("DENIED", message)
    assert log == ["post", "result"]


def test_non_conforming_approval_outcome_fails_closed_on_the_final_path() -> None:
    # B070: POLICY_ERROR, post-execute skipped.
    log: list[str] = []
    registry = echo_registry(log, approval=Service("maybe"))
    registry.add_plugin(AskPolicy())
    registry.add_plugin(Recorder(log))
    result = failure(registry.execute_sync(call(agent="a")))
    assert result.code == "POLICY_ERROR"
    assert "'maybe'" in result.error.message
    assert log == ["result"]


def test_raising_approval_service_fails_closed() -> None:
    # B070 (a raising service is handled like a raising pre-execute listener).
    class Broken:
        def request(self, request: ApprovalRequest) -> str:
            raise ConnectionError("editor went away")

    log: list[str] = []
    registry = echo_registry(log, approval=Broken())
    registry.add_plugin(AskPolicy())
    registry.add_plugin(Recorder(log))
    result = failure(registry.execute_sync(call(agent="a")))
    assert result.code == "POLICY_ERROR"
    assert "editor went away" in result.error.message
    assert log == ["result"]


@pytest.mark.anyio
async def test_async_approval_service_is_awaited() -> None:
    # B066 with an async service.
    class Async:
        async def request(self, request: ApprovalRequest) -> ApprovalOutcome:
            await anyio.sleep(0)
            return ApprovalOutcome.ALLOWED_ONCE

    registry = echo_registry([], approval=Async())
    registry.add_plugin(AskPolicy())
    result = await registry.execute(call(agent="a"))
    assert result.value == "hi"


def test_approval_service_is_looked_up_at_each_ask() -> None:
    # B071
    registry = echo_registry([], approval=Service("allowed-once"))
    registry.add_plugin(AskPolicy("needs a person"))
    assert not registry.execute_sync(call(agent="a")).is_error
    registry.approval = None
    result = failure(registry.execute_sync(call(agent="a")))
    assert result.error.message == "needs a person"


# ------------------------------------------------------------------ guards


def test_guard_string_denies_on_the_post_path() -> None:
    # B072: the reason verbatim, body not called, post-execute still runs.
    log: list[str] = []
    registry = echo_registry(log)
    registry.guard(lambda execution: "no secrets")
    registry.add_plugin(Recorder(log))
    result = failure(registry.execute_sync(call()))
    assert (result.code, result.error.message) == ("DENIED", "no secrets")
    assert result.content == [text("Error: no secrets")]
    assert log == ["post", "result"]


def test_guard_disposer_lifts_the_guard() -> None:
    # B072: guard() returns a disposer.
    registry = echo_registry([])
    dispose = registry.guard(lambda execution: "no")
    assert registry.execute_sync(call()).is_error
    dispose()
    dispose()
    assert not registry.execute_sync(call()).is_error


def test_guards_are_not_called_when_pre_execute_denied() -> None:
    # B073
    log: list[str] = []
    registry = echo_registry(log)
    registry.guard(lambda execution: log.append("guard"))  # type: ignore[func-returns-value]

    class Denier:
        @hookimpl
        def dsh_tools_pre_execute(self) -> Deny:
            return Deny("no")

    registry.add_plugin(Denier())
    registry.execute_sync(call())
    assert log == []


def test_an_explicit_allow_cannot_bypass_a_guard() -> None:
    # B074: guards are monotonic, whatever the pre-execute order.
    log: list[str] = []
    registry = echo_registry(log)

    class Outermost:
        @hookimpl(tryfirst=True)
        def dsh_tools_pre_execute(self) -> Allow:
            return Allow()

    class Guard:
        @hookimpl
        def dsh_tools_guard(self) -> str:
            return "plugin guard"

    registry.add_plugin(Outermost())
    registry.add_plugin(Guard())
    assert failure(registry.execute_sync(call())).error.message == "plugin guard"
    assert log == []


def test_guard_order_global_then_scope_chain_and_first_string_wins() -> None:
    # B075: global guards in registration order, then farthest ancestor to own layer.
    log: list[str] = []
    registry = echo_registry(log)

    def guard(name: str, verdict: str | None = None) -> Any:
        def check(execution: ToolExecution) -> str | None:
            log.append(name)
            return verdict

        return check

    registry.scope("a").scope("b").guard(guard("b"))
    registry.scope("a").guard(guard("a", "denied by a"))
    registry.guard(guard("g1"))
    registry.guard(guard("g2"))
    result = failure(registry.scope("a").scope("b").execute_sync(call()))
    assert result.error.message == "denied by a"
    assert log == ["g1", "g2", "a"]


def test_abstain_then_deny_denies_and_the_body_never_runs() -> None:
    # B075: [abstain, deny] -> deny, body count 0.
    log: list[str] = []
    registry = echo_registry(log)
    registry.guard(lambda execution: None)
    registry.guard(lambda execution: "second")
    assert failure(registry.execute_sync(call())).error.message == "second"
    assert log == []


def test_scoped_guard_applies_only_to_its_agent_and_descendants() -> None:
    # B076
    registry = echo_registry([])
    registry.scope("a").guard(lambda execution: "a only")
    assert not registry.execute_sync(call()).is_error
    assert not registry.scope("b").execute_sync(call()).is_error
    assert registry.scope("a").execute_sync(call()).is_error
    assert registry.scope("a").scope("child").execute_sync(call()).is_error


def test_plain_guard_applies_to_agentless_and_scoped_calls() -> None:
    # B076
    registry = echo_registry([])
    registry.guard(lambda execution: "everyone")
    assert registry.execute_sync(call()).is_error
    assert registry.scope("a").execute_sync(call()).is_error


def test_empty_string_guard_verdict_denies() -> None:
    # B077: only None abstains.
    log: list[str] = []
    registry = echo_registry(log)
    registry.guard(lambda execution: "")
    result = failure(registry.execute_sync(call()))
    assert result.error.message == ""
    assert result.content == [text("Error: ")]
    assert log == []


def test_raising_guard_denies_on_the_final_path() -> None:
    # B078: fails closed with DENIED (our code), post-execute skipped.
    log: list[str] = []
    registry = echo_registry(log)

    def broken(execution: ToolExecution) -> str | None:
        raise KeyError("missing rule")

    registry.guard(broken)
    registry.add_plugin(Recorder(log))
    result = failure(registry.execute_sync(call()))
    assert result.code == "DENIED"
    assert "missing rule" in result.error.message
    assert log == ["result"]


def test_guard_returning_a_non_string_fails_closed() -> None:
    # B077 (Python port: True/1 are not reasons; the call is denied, not allowed).
    log: list[str] = []
    registry = echo_registry(log)
    registry.guard(lambda execution: True)  # type: ignore[arg-type,return-value]
    result = failure(registry.execute_sync(call()))
    assert result.code == "DENIED"
    assert log == []


def test_guard_sees_frozen_arguments() -> None:
    # B079
    seen: list[object] = []
    registry = echo_registry([])

    def inspect_args(execution: ToolExecution) -> None:
        seen.append(execution.arguments)
        with pytest.raises(TypeError):
            execution.arguments["text"] = "x"  # type: ignore[index]

    registry.guard(inspect_args)
    assert registry.execute_sync(call()).value == "hi"
    assert seen == [{"text": "hi"}]


def test_same_guard_registered_twice_is_two_entries() -> None:
    # B080
    calls: list[int] = []

    def deny(execution: ToolExecution) -> str:
        calls.append(1)
        return "twice"

    registry = echo_registry([])
    first = registry.guard(deny)
    registry.guard(deny)
    first()
    assert failure(registry.execute_sync(call())).error.message == "twice"
    assert calls == [1]


def test_async_guard_is_refused_at_registration() -> None:
    # design.md: guards are synchronous final checks.
    registry = echo_registry([])

    async def guard(execution: ToolExecution) -> None:
        return None

    with pytest.raises(ValueError, match="async"):
        registry.guard(guard)  # type: ignore[arg-type]


def test_post_execute_accept_does_not_undo_a_guard_denial() -> None:
    # B074 / B106: a failure cannot become a success.
    registry = echo_registry([])
    registry.guard(lambda execution: "no")

    class Forgiving:
        @hookimpl
        def dsh_tools_post_execute(self) -> Accept:
            return Accept(content=["all good"])

    registry.add_plugin(Forgiving())
    result = failure(registry.execute_sync(call()))
    assert result.content == [text("all good")]
    assert result.code == "DENIED"
