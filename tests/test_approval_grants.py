"""Grants that end: an ``allowed-always`` answer with a lifetime or a use count allows
later calls until it runs out, then the next call asks again; on every first-party store
(the ``approval_store`` fixture runs each test on memory, SQLite and PostgreSQL)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from deploy_calls import code, deploy, make_registry
from dsh_tools import (
    ApprovalAnswer,
    ApprovalKey,
    ApprovalOutcome,
    MemoryApprovalStore,
)


def test_a_grant_of_n_uses_allows_n_later_calls_then_asks_again(approval_store: Any) -> None:
    registry, approval, ran = make_registry(approval_store)
    approval.answer(ApprovalAnswer("allowed-always", uses=2, expires_in_s=3600))
    assert [code(registry.execute_sync(deploy())) for _ in range(3)] == ["ok"] * 3
    assert len(approval.requests) == 1
    # Used up: the fourth call asks, and nobody answers.
    assert code(registry.execute_sync(deploy())) == "DENIED"
    assert len(approval.requests) == 2
    assert ran == ["web"] * 3


def test_an_expired_grant_asks_again(approval_store: Any) -> None:
    registry, approval, ran = make_registry(approval_store)
    approval.answer(ApprovalAnswer("allowed-always", expires_in_s=0.05))
    assert code(registry.execute_sync(deploy())) == "ok"
    time.sleep(0.3)
    approval.answer("allowed-once")
    assert code(registry.execute_sync(deploy())) == "ok"
    assert len(approval.requests) == 2
    assert ran == ["web", "web"]


def test_a_widened_grant_counts_calls_with_any_arguments(approval_store: Any) -> None:
    registry, approval, ran = make_registry(approval_store)
    approval.answer(ApprovalAnswer("allowed-always", any_arguments=True, uses=1))
    assert code(registry.execute_sync(deploy("web"))) == "ok"
    assert code(registry.execute_sync(deploy("db"))) == "ok"
    assert code(registry.execute_sync(deploy("cache"))) == "DENIED"
    assert ran == ["web", "db"]


def test_a_grant_that_never_ends_is_not_used_up(approval_store: Any) -> None:
    registry, approval, _ = make_registry(approval_store)
    approval.answer("allowed-always")
    assert [code(registry.execute_sync(deploy())) for _ in range(4)] == ["ok"] * 4
    assert len(approval.requests) == 1


def test_explain_reads_a_grant_without_using_it(approval_store: Any) -> None:
    registry, approval, _ = make_registry(approval_store)
    approval.answer(ApprovalAnswer("allowed-always", uses=1))
    assert code(registry.execute_sync(deploy())) == "ok"
    for _ in range(3):
        assert registry.explain(deploy()).outcome == "run"
    assert code(registry.execute_sync(deploy())) == "ok"
    assert registry.explain(deploy()).outcome == "ask"
    assert len(approval.requests) == 1


def test_a_remembered_rejection_beats_a_grant_and_uses_none_of_it(approval_store: Any) -> None:
    registry, _, ran = make_registry(approval_store)
    key = ApprovalKey.for_call("ops", "deploy", {"service": "web"})
    approval_store.remember(key, ApprovalOutcome.ALLOWED_ALWAYS, uses=1)
    approval_store.remember(ApprovalKey.for_tool("ops", "deploy"), ApprovalOutcome.REJECTED_ALWAYS)
    assert code(registry.execute_sync(deploy())) == "DENIED"
    assert approval_store.use(key) is ApprovalOutcome.ALLOWED_ALWAYS
    assert ran == []


class ForeverOnly:
    """A store that keeps only answers that never end (it has no ``use``)."""

    def __init__(self) -> None:
        self.inner = MemoryApprovalStore()

    def recall(self, key: ApprovalKey) -> ApprovalOutcome | None:
        return self.inner.recall(key)

    def remember(self, key: ApprovalKey, outcome: ApprovalOutcome) -> None:
        self.inner.remember(key, outcome)


def test_a_store_without_grants_that_end_fails_such_an_answer_closed() -> None:
    registry, approval, ran = make_registry(ForeverOnly())
    approval.answer(ApprovalAnswer("allowed-always", uses=3), "allowed-always")
    result = registry.execute_sync(deploy())
    assert code(result) == "POLICY_ERROR"
    assert (
        "ForeverOnly keeps no grants that end (it has no use()), and this answer ends (uses)"
        in (result.error.message)
    )
    # An answer that never ends is kept and decides the next call without asking.
    assert [code(registry.execute_sync(deploy())) for _ in range(2)] == ["ok", "ok"]
    assert len(approval.requests) == 2
    assert ran == ["web", "web"]


class RunsOutMeanwhile(MemoryApprovalStore):
    """Recalls an allowance, but the grant is gone (or the store fails) when it is used."""

    def __init__(self, use: object) -> None:
        super().__init__()
        self._use = use

    def use(self, key: ApprovalKey) -> ApprovalOutcome | None:
        if isinstance(self._use, BaseException):
            raise self._use
        return None


@pytest.mark.parametrize("use", [None, OSError("server closed the connection")])
def test_a_grant_that_ran_out_since_it_was_recalled_asks_again(use: object) -> None:
    store = RunsOutMeanwhile(use)
    store.remember(ApprovalKey.for_tool("ops", "deploy"), ApprovalOutcome.ALLOWED_ALWAYS)
    registry, approval, ran = make_registry(store)
    assert code(registry.execute_sync(deploy())) == "DENIED"
    approval.answer("allowed-once")
    assert code(registry.execute_sync(deploy())) == "ok"
    assert len(approval.requests) == 2
    assert ran == ["web"]


@pytest.mark.parametrize(
    ("outcome", "options", "error", "match"),
    [
        ("rejected-always", {"uses": 2}, ValueError, "may end, not 'rejected-always'"),
        ("allowed-once", {"expires_in_s": 1}, ValueError, "may end, not 'allowed-once'"),
        ("allowed-always", {"uses": 2.0}, TypeError, "uses must be an int, got float"),
        ("allowed-always", {"expires_in_s": "60"}, TypeError, "must be a number, got str"),
        ("allowed-always", {"expires_in_s": float("inf")}, ValueError, "seconds, got inf"),
    ],
)
def test_an_answer_that_cannot_end_as_asked_is_refused(
    outcome: str, options: Any, error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        ApprovalAnswer(outcome, **options)
