"""What every first-party approval store does with remembered answers and grants that
end: memory, SQLite and PostgreSQL (the ``approval_store`` fixture runs each test on
each)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from dsh_tools import ApprovalKey, ApprovalOutcome

ALLOWED, REJECTED = ApprovalOutcome.ALLOWED_ALWAYS, ApprovalOutcome.REJECTED_ALWAYS
EXACT = ApprovalKey.for_call("ops", "deploy", {"service": "web"})
TOOL = ApprovalKey.for_tool("ops", "deploy")


def test_answers_are_kept_per_key_and_replaced(approval_store: Any) -> None:
    approval_store.remember(EXACT, ALLOWED)
    approval_store.remember(TOOL, REJECTED)
    assert approval_store.recall(EXACT) is ALLOWED
    assert approval_store.recall(TOOL) is REJECTED
    assert approval_store.recall(ApprovalKey.for_tool("ops/child", "deploy")) is None
    approval_store.remember(EXACT, REJECTED)
    assert approval_store.recall(EXACT) is REJECTED


def test_forget_drops_one_agent_or_all(approval_store: Any) -> None:
    child = ApprovalKey.for_tool("ops/child", "deploy")
    approval_store.remember(TOOL, ALLOWED)
    approval_store.remember(child, REJECTED)
    approval_store.forget("ops")
    assert (approval_store.recall(TOOL), approval_store.recall(child)) == (None, REJECTED)
    approval_store.forget()
    assert approval_store.recall(child) is None


def test_a_counted_grant_allows_that_many_uses(approval_store: Any) -> None:
    approval_store.remember(EXACT, ALLOWED, uses=2)
    assert approval_store.recall(EXACT) is ALLOWED
    assert [approval_store.use(EXACT) for _ in range(3)] == [ALLOWED, ALLOWED, None]
    assert approval_store.recall(EXACT) is None
    # A new answer replaces the used-up grant.
    approval_store.remember(EXACT, ALLOWED)
    assert [approval_store.use(EXACT) for _ in range(3)] == [ALLOWED] * 3
    assert approval_store.recall(EXACT) is ALLOWED


def test_a_grant_ends_when_its_lifetime_is_over(approval_store: Any) -> None:
    approval_store.remember(EXACT, ALLOWED, expires_in_s=3600, uses=5)
    approval_store.remember(TOOL, ALLOWED, expires_in_s=0.05)
    assert approval_store.recall(EXACT) is ALLOWED
    assert approval_store.use(EXACT) is ALLOWED
    time.sleep(0.3)
    assert approval_store.recall(TOOL) is None
    assert approval_store.use(TOOL) is None
    assert approval_store.recall(EXACT) is ALLOWED


def test_only_an_allowance_is_used(approval_store: Any) -> None:
    approval_store.remember(TOOL, REJECTED)
    assert approval_store.use(TOOL) is None
    assert approval_store.use(EXACT) is None
    assert approval_store.recall(TOOL) is REJECTED


@pytest.mark.parametrize(
    ("outcome", "limits", "error", "match"),
    [
        (REJECTED, {"uses": 3}, ValueError, "only an allowed-always answer may end"),
        (REJECTED, {"expires_in_s": 60}, ValueError, "only an allowed-always answer may end"),
        (ALLOWED, {"uses": 0}, ValueError, "uses must be at least 1"),
        (ALLOWED, {"uses": True}, TypeError, "uses must be an int, got bool"),
        (ALLOWED, {"expires_in_s": -1}, ValueError, "positive number of seconds"),
        (ALLOWED, {"expires_in_s": float("nan")}, ValueError, "positive number of seconds"),
        (ApprovalOutcome.ALLOWED_ONCE, {}, ValueError, "not 'allowed-once'"),
    ],
)
def test_a_grant_that_cannot_be_kept_is_refused(
    approval_store: Any, outcome: ApprovalOutcome, limits: Any, error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        approval_store.remember(EXACT, outcome, **limits)
    assert approval_store.recall(EXACT) is None


def test_concurrent_uses_never_share_one(approval_store: Any) -> None:
    approval_store.remember(EXACT, ALLOWED, uses=5)
    taken: list[object] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def work() -> None:
        try:
            start.wait()
            for _ in range(3):
                taken.append(approval_store.use(EXACT))
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert taken.count(ALLOWED) == 5
    assert taken.count(None) == 19
