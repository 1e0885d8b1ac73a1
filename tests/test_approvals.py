"""Remembered approvals: ``allowed-always`` and ``rejected-always`` answers are kept per
agent scope, tool and exact arguments (or widened to the tool), guards still run, and a
store that fails never allows."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest

from approval_helpers import add_write_tool, code
from dsh_tools import (
    ApprovalAnswer,
    ApprovalKey,
    ApprovalOutcome,
    Ask,
    MemoryApprovalStore,
    RegistrationError,
    ToolExecutionInput,
    ToolRegistry,
    hookimpl,
)
from dsh_tools.testing import CallRecorder, ScriptedApproval


class AskAlways:
    @hookimpl
    def dsh_tools_pre_execute(self, execution: Any) -> Ask:
        return Ask("writes files")


def make_registry(**options: Any) -> tuple[ToolRegistry, ScriptedApproval, list[str]]:
    """A registry with a ``write`` tool every call of which asks; ``ran`` lists the paths
    its body wrote."""
    approval = ScriptedApproval()
    registry = ToolRegistry(approval=approval, **options)
    ran = add_write_tool(registry)
    registry.add_plugin(AskAlways())
    return registry, approval, ran


def call(path: str = "a.txt", agent: str | None = "coder", **arguments: Any) -> ToolExecutionInput:
    return ToolExecutionInput("c1", "write", {"path": path, **arguments}, agent=agent)


def test_allowed_always_is_remembered_for_the_same_arguments_only() -> None:
    registry, approval, ran = make_registry()
    approval.answer("allowed-always")
    assert code(registry.execute_sync(call())) == "ok"
    assert code(registry.execute_sync(call())) == "ok"
    assert len(approval.requests) == 1
    # Another value asks again (and nothing is scripted, so nobody can answer).
    assert code(registry.execute_sync(call("b.txt"))) == "DENIED"
    assert len(approval.requests) == 2
    assert ran == ["a.txt", "a.txt"]


def test_allowed_once_and_the_other_outcomes_are_not_remembered() -> None:
    registry, approval, ran = make_registry()
    approval.answer("allowed-once", "rejected", "cancelled", "unavailable")
    assert code(registry.execute_sync(call())) == "ok"
    for _ in range(3):
        assert code(registry.execute_sync(call())) == "DENIED"
    assert len(approval.requests) == 4
    assert ran == ["a.txt"]


def test_two_agents_with_the_same_call_keep_separate_memories() -> None:
    registry, approval, ran = make_registry()
    approval.answer("allowed-always")
    assert code(registry.execute_sync(call(agent="coder"))) == "ok"
    assert code(registry.execute_sync(call(agent="reviewer"))) == "DENIED"
    assert code(registry.execute_sync(call(agent="coder"))) == "ok"
    assert [request.agent for request in approval.requests] == ["coder", "reviewer"]
    assert ran == ["a.txt", "a.txt"]


def test_a_nested_scope_neither_inherits_nor_lends_its_memory() -> None:
    registry, approval, ran = make_registry()
    assert ran == []
    lead = registry.scope("lead")
    sub = lead.scope("sub")
    approval.answer("allowed-always", "allowed-always")
    assert code(lead.execute_sync(call(agent=None))) == "ok"
    assert code(sub.execute_sync(call(agent=None))) == "ok"  # asked: the second answer
    assert code(sub.execute_sync(call(agent=None))) == "ok"  # remembered for lead/sub
    assert code(lead.execute_sync(call(agent=None))) == "ok"  # remembered for lead
    assert [request.agent for request in approval.requests] == ["lead", "lead/sub"]
    # A sibling remembers nothing.
    assert code(lead.scope("other").execute_sync(call(agent=None))) == "DENIED"
    assert len(ran) == 4


def test_an_answer_widened_to_the_tool_covers_any_arguments_of_that_agent() -> None:
    registry, approval, ran = make_registry()
    approval.answer(ApprovalAnswer("allowed-always", any_arguments=True))
    for path in ("a.txt", "b.txt", "c.txt"):
        assert code(registry.execute_sync(call(path))) == "ok"
    assert len(approval.requests) == 1
    assert code(registry.execute_sync(call(agent="reviewer"))) == "DENIED"
    assert ran == ["a.txt", "b.txt", "c.txt"]


def test_rejected_always_denies_later_calls_without_asking() -> None:
    registry, approval, ran = make_registry()
    approval.answer("rejected-always")
    first = registry.execute_sync(call())
    assert first.error.message == 'the user rejected tool "write"'
    again = registry.execute_sync(call())
    assert code(again) == "DENIED"
    assert again.error.message == 'the user rejected tool "write" (a remembered answer)'
    assert len(approval.requests) == 1
    assert ran == []


def test_a_remembered_rejection_wins_over_a_remembered_allowance() -> None:
    registry, approval, ran = make_registry()
    approval.answer("rejected-always", ApprovalAnswer("allowed-always", any_arguments=True))
    assert code(registry.execute_sync(call("secret.txt"))) == "DENIED"
    assert code(registry.execute_sync(call("notes.txt"))) == "ok"  # widened allowance
    assert code(registry.execute_sync(call("secret.txt"))) == "DENIED"  # still rejected
    assert len(approval.requests) == 2
    assert ran == ["notes.txt"]


def test_a_tool_wide_rejection_wins_over_an_exact_allowance() -> None:
    # Rejection wins whichever of the two is the narrower: an "always allow" for these
    # exact arguments does not outweigh "always reject" for every call of the tool.
    registry, approval, ran = make_registry()
    approval.answer("allowed-always", ApprovalAnswer("rejected-always", any_arguments=True))
    assert code(registry.execute_sync(call("notes.txt"))) == "ok"  # exact allowance
    assert code(registry.execute_sync(call("other.txt"))) == "DENIED"  # rejects the tool
    again = registry.execute_sync(call("notes.txt"))
    assert again.error.message == 'the user rejected tool "write" (a remembered answer)'
    assert len(approval.requests) == 2
    assert ran == ["notes.txt"]


def test_guards_still_deny_after_a_remembered_allowance() -> None:
    registry, approval, ran = make_registry()
    approval.answer("allowed-always")
    assert code(registry.execute_sync(call())) == "ok"
    registry.guard(lambda execution: "disk is read-only now")
    result = registry.execute_sync(call())
    assert (code(result), result.error.message) == ("DENIED", "disk is read-only now")
    assert len(approval.requests) == 1
    assert ran == ["a.txt"]


def test_a_denying_pre_execute_decides_before_any_remembered_allowance() -> None:
    registry, approval, ran = make_registry()
    approval.answer("allowed-always")
    assert code(registry.execute_sync(call())) == "ok"

    class DenyFirst:
        @hookimpl(tryfirst=True)
        def dsh_tools_pre_execute(self, execution: Any) -> Any:
            from dsh_tools import Deny

            return Deny("frozen")

    registry.add_plugin(DenyFirst())
    assert registry.execute_sync(call()).error.message == "frozen"
    assert ran == ["a.txt"]


class FailingStore:
    """A store whose reads or writes raise, or whose reads return junk."""

    def __init__(self, *, recall: object = None, remember: Exception | None = None) -> None:
        self._recall = recall
        self._remember = remember
        self.kept: list[tuple[ApprovalKey, ApprovalOutcome]] = []

    def recall(self, key: ApprovalKey) -> Any:
        if isinstance(self._recall, Exception):
            raise self._recall
        return self._recall

    def remember(self, key: ApprovalKey, outcome: ApprovalOutcome) -> None:
        if self._remember is not None:
            raise self._remember
        self.kept.append((key, outcome))


@pytest.mark.parametrize(
    "recall",
    [OSError("disk gone"), mock.ANY, "allowed-oncE", ApprovalOutcome.ALLOWED_ONCE],
    ids=["raises", "mock.ANY", "not an outcome", "not an always-outcome"],
)
def test_a_store_that_fails_to_recall_asks_again(recall: object) -> None:
    store = FailingStore(recall=recall)
    registry, approval, ran = make_registry(approval_store=store)
    recorder = CallRecorder()
    registry.tracer = recorder
    # Nobody answers: the call is denied, never allowed by the broken store.
    assert code(registry.execute_sync(call())) == "DENIED"
    assert len(approval.requests) == 1
    approval.answer("allowed-once")
    assert code(registry.execute_sync(call())) == "ok"
    assert len(approval.requests) == 2
    outcomes = [event.outcome for event in recorder.calls[0].events if event.stage == "approval"]
    assert outcomes[0].startswith("recall raised ")
    assert ran == ["a.txt"]


@pytest.mark.parametrize("answer", ["allowed-always", "rejected-always"])
def test_a_store_that_fails_to_remember_fails_the_call_closed(answer: str) -> None:
    store = FailingStore(remember=OSError("read-only file system"))
    registry, approval, ran = make_registry(approval_store=store)
    approval.answer(answer)
    result = registry.execute_sync(call())
    assert code(result) == "POLICY_ERROR"
    assert result.error.message.startswith(
        f'approval store failed to remember {answer} for tool "write": '
    )
    assert "read-only file system" in result.error.message
    assert ran == []


def test_the_trace_shows_stored_and_remembered_answers() -> None:
    recorder = CallRecorder()
    registry, approval, _ = make_registry(tracer=recorder)
    approval.answer("allowed-always")
    registry.execute_sync(call())
    registry.execute_sync(call())
    first, second = (
        [(event.source, event.outcome) for event in recorded.events if event.stage == "approval"]
        for recorded in recorder.calls
    )
    assert first == [
        ("approval service", "allowed-always"),
        ("approval store", "stored allowed-always"),
    ]
    assert second == [("approval store", "remembered allowed-always")]


def test_a_call_cancelled_while_asked_is_aborted_and_not_remembered() -> None:
    from dsh_tools import CancelSource

    source = CancelSource()
    store = MemoryApprovalStore()
    registry, _, ran = make_registry(approval_store=store)

    class CancelThenAllow:
        def request(self, request: Any) -> str:
            source.cancel()
            return "allowed-always"

    registry.approval = CancelThenAllow()
    result = registry.execute_sync(
        ToolExecutionInput("c1", "write", {"path": "a"}, agent="coder", signal=source.signal)
    )
    assert code(result) == "ABORTED_BEFORE_DISPATCH"
    key = ApprovalKey.for_call("coder", "write", {"path": "a"})
    assert store.recall(key) is None
    assert ran == []


def test_the_key_hashes_canonical_json_of_the_tool_and_arguments() -> None:
    key = ApprovalKey.for_call("a", "t", {"x": 1, "y": [1, "é"]})
    assert key == ApprovalKey.for_call("a", "t", {"y": [1, "é"], "x": 1})
    assert len(key.arguments_sha256 or "") == 64
    others = [{"x": 1.0, "y": [1, "é"]}, {"x": True, "y": [1, "é"]}, {"x": 1, "y": ["é", 1]}]
    assert all(ApprovalKey.for_call("a", "t", other) != key for other in others)
    assert ApprovalKey.for_call("a", "u", {"x": 1, "y": [1, "é"]}) != key
    assert ApprovalKey.for_tool("a", "t").arguments_sha256 is None


def test_an_approval_answer_is_checked_when_made() -> None:
    with pytest.raises(ValueError, match="'allowed-once' is not remembered"):
        ApprovalAnswer("allowed-once", any_arguments=True)
    with pytest.raises(TypeError, match="got _ANY"):
        ApprovalAnswer(mock.ANY)
    with pytest.raises(TypeError, match="any_arguments must be a bool"):
        ApprovalAnswer("allowed-always", any_arguments=1)  # type: ignore[arg-type]
    assert ApprovalAnswer("rejected-always").outcome is ApprovalOutcome.REJECTED_ALWAYS


def test_the_store_is_configured_on_the_registry() -> None:
    store = MemoryApprovalStore()
    registry, approval, _ = make_registry(approval_store=store)
    assert registry.approval_store is store
    approval.answer("allowed-always")
    registry.execute_sync(call())
    # A new store applies to the next call: the memory went with the old one.
    registry.approval_store = None
    assert isinstance(registry.approval_store, MemoryApprovalStore)
    assert code(registry.execute_sync(call())) == "DENIED"
    with pytest.raises(RegistrationError, match="recall\\(\\) and remember\\(\\)"):
        registry.approval_store = object()  # type: ignore[assignment]


def test_forgetting_one_agent_keeps_the_others() -> None:
    store = MemoryApprovalStore()
    registry, approval, _ = make_registry(approval_store=store)
    approval.answer("allowed-always", "allowed-always")
    registry.execute_sync(call(agent="coder"))
    registry.execute_sync(call(agent="reviewer"))
    store.forget("coder")
    assert code(registry.execute_sync(call(agent="reviewer"))) == "ok"
    assert code(registry.execute_sync(call(agent="coder"))) == "DENIED"
    store.forget()
    assert code(registry.execute_sync(call(agent="reviewer"))) == "DENIED"
