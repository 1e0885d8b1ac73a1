"""A ticket answered "always" may end, as an in-process answer may: ``TicketAnswer``'s
``expires_in_s`` and ``uses`` are kept by every first-party store (the
``approval_store`` fixture runs each test on memory, SQLite and PostgreSQL) and bound
the grant the resumed call remembers."""

from __future__ import annotations

import itertools
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from approval_helpers import add_write_tool, code
from dsh_tools import Ask, TicketAnswer, ToolExecutionInput, ToolRegistry, hookimpl
from dsh_tools_plugins._stores.sqlite_schema import SCHEMA_VERSION
from dsh_tools_plugins.approval_store import SqliteApprovalStore

_CALL_IDS = itertools.count(1)


def call() -> ToolExecutionInput:
    """The model's call of ``write``, a new call id each time (the call journal of a
    durable store replays a repeat of one call id)."""
    return ToolExecutionInput(f"c{next(_CALL_IDS)}", "write", {"path": "a.txt"}, agent="coder")


class AskAlways:
    @hookimpl
    def dsh_tools_pre_execute(self, execution: Any) -> Ask:
        return Ask("writes files")


def asking(store: Any) -> tuple[ToolRegistry, list[str]]:
    registry = ToolRegistry(approval=lambda request: "pending", approval_store=store)
    ran = add_write_tool(registry)
    registry.add_plugin(AskAlways(), name="permissions")
    return registry, ran


def answered(store: Any, registry: ToolRegistry, **answer: Any) -> str:
    """The id of the call's ticket, answered allowed-always by ana with ``answer``."""
    result = registry.execute_sync(call())
    assert code(result) == "APPROVAL_PENDING"
    ticket: str = result.meta["approval"]["ticket"]  # type: ignore[index]
    store.answer_ticket(ticket, TicketAnswer("allowed-always", "ana", "cli", **answer))  # type: ignore[arg-type]
    return ticket


def test_a_ticket_grant_of_n_uses_allows_n_later_calls(approval_store: Any) -> None:
    registry, ran = asking(approval_store)
    ticket = answered(approval_store, registry, uses=2, expires_in_s=3600)
    kept = approval_store.get_ticket(ticket).answer
    assert (kept.uses, kept.expires_in_s) == (2, 3600.0)
    codes = [code(registry.execute_sync(call())) for _ in range(4)]
    assert codes == ["ok", "ok", "ok", "APPROVAL_PENDING"]
    assert ran == ["a.txt"] * 3


def test_a_ticket_grant_that_expired_asks_again(approval_store: Any) -> None:
    registry, ran = asking(approval_store)
    answered(approval_store, registry, expires_in_s=0.05)
    assert code(registry.execute_sync(call())) == "ok"
    time.sleep(0.3)
    assert code(registry.execute_sync(call())) == "APPROVAL_PENDING"
    assert ran == ["a.txt"]


@pytest.mark.parametrize(
    ("outcome", "limits", "problem"),
    [
        ("allowed-once", {"uses": 2}, "only an allowed-always answer may end"),
        ("rejected-always", {"expires_in_s": 60}, "only an allowed-always answer may end"),
        ("allowed-always", {"uses": 0}, "uses must be at least 1"),
        ("allowed-always", {"expires_in_s": float("nan")}, "expires_in_s must be a positive"),
        ("allowed-always", {"uses": True}, "uses must be an int"),
    ],
)
def test_a_ticket_answer_that_cannot_end_so_is_refused(
    outcome: str, limits: dict[str, Any], problem: str
) -> None:
    with pytest.raises((TypeError, ValueError), match=problem):
        TicketAnswer(outcome, "ana", "cli", **limits)  # type: ignore[arg-type]


V2_TICKET_ANSWER = (
    '{"any_arguments":false,"by":"ana","channel":"cli","feedback":null,"outcome":"allowed-always"}'
)


def test_a_version_2_file_keeps_its_answers_and_old_code_cannot_misread_new_ones(
    tmp_path: Path,
) -> None:
    path = tmp_path / "approvals.sqlite3"
    store = SqliteApprovalStore(path)
    registry, _ = asking(store)
    ticket = registry.execute_sync(call()).meta["approval"]["ticket"]  # type: ignore[index]
    with sqlite3.connect(path) as connection:  # as version 2 of the store left it
        connection.execute(
            "UPDATE tickets SET state = 'answered', answer = ?, answered_at = 1 WHERE id = ?",
            (V2_TICKET_ANSWER, ticket),
        )
        connection.execute("PRAGMA user_version = 2")
    connection.close()
    again = SqliteApprovalStore(path)
    kept = again.get_ticket(ticket).answer
    assert (kept.outcome.value, kept.uses, kept.expires_in_s) == ("allowed-always", None, None)
    with sqlite3.connect(path) as connection:
        # Version 2 code refuses this file: it would read a grant that ends as one that
        # never does.
        assert connection.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    connection.close()
    registry, ran = asking(again)
    assert [code(registry.execute_sync(call())) for _ in range(3)] == ["ok"] * 3
    assert ran == ["a.txt"] * 3
