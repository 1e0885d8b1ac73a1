"""``dsh-tools approvals``: list, show, approve and reject tickets in a store another
process opened them in."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from dsh_tools.approvals import ApprovalKey, ApprovalTicket, TicketState
from dsh_tools.cli import EXIT_CALL_FAILED, EXIT_OK, EXIT_USAGE, main
from dsh_tools.json import snapshot
from dsh_tools.models import ApprovalOutcome
from dsh_tools.presentation import DiffCallView, file_diffs, unstructure_view
from dsh_tools_plugins.approval_store import SqliteApprovalStore


def dsh(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def store(tmp_path: Path) -> SqliteApprovalStore:
    return SqliteApprovalStore(tmp_path / "approvals.sqlite3")


def open_ticket(store: SqliteApprovalStore, path: str = "notes.txt", text: str = "new\n") -> str:
    arguments = snapshot({"path": path, "content": text})
    card = DiffCallView(f"Write {path}", file_diffs(path, "old\n", text))
    ticket = ApprovalTicket.new(
        ApprovalKey.for_call("agent-1", "write_file", arguments),
        "call-1",
        arguments,
        created_at=time.time(),
        expires_at=time.time() + 600,
        reason="writes files",
        card=snapshot(unstructure_view(card)),
        asked_by=snapshot({"plugin": "permissions", "rule": "ask write_file", "line": 3}),
    )
    return store.open_ticket(ticket).id


def test_list_shows_pending_tickets_one_line_each(store: SqliteApprovalStore) -> None:
    first = open_ticket(store)
    second = open_ticket(store, "other.txt")
    code, out, _ = dsh("--approvals-store", str(store.path), "approvals", "list")
    assert code == EXIT_OK
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == [first, second]
    assert "write_file" in lines[0]
    assert "Write notes.txt" in lines[0]


def test_show_prints_the_card_and_the_record(store: SqliteApprovalStore) -> None:
    ticket = open_ticket(store)
    code, out, _ = dsh("--approvals-store", str(store.path), "approvals", "show", ticket)
    assert code == EXIT_OK
    assert "+new" in out
    assert "-old" in out
    assert "asked by: permissions: ask write_file (line 3)" in out
    assert "state: pending" in out


def test_approve_answers_once_and_a_second_answer_is_too_late(
    store: SqliteApprovalStore,
) -> None:
    ticket = open_ticket(store)
    where = ("--approvals-store", str(store.path), "approvals")
    code, out, _ = dsh(*where, "approve", ticket, "--json")
    assert code == EXIT_OK
    answered = json.loads(out)
    assert answered["state"] == "answered"
    assert answered["answer"]["outcome"] == "allowed-once"
    assert answered["answer"]["channel"] == "cli"
    code, _, err = dsh(*where, "reject", ticket, "--feedback", "no")
    assert code == EXIT_CALL_FAILED
    assert "too late" in err
    kept = store.get_ticket(ticket)
    assert kept is not None
    assert kept.answer is not None
    assert kept.answer.outcome is ApprovalOutcome.ALLOWED_ONCE


def test_reject_carries_feedback_and_approve_always_is_remembered_kind(
    store: SqliteApprovalStore,
) -> None:
    rejected, approved = open_ticket(store), open_ticket(store, "b.txt")
    where = ("--approvals-store", str(store.path), "approvals")
    assert dsh(*where, "reject", rejected, "--feedback", "write to docs/")[0] == EXIT_OK
    assert dsh(*where, "approve", approved, "--always")[0] == EXIT_OK
    no, yes = store.get_ticket(rejected), store.get_ticket(approved)
    assert no is not None
    assert no.answer is not None
    assert yes is not None
    assert yes.answer
    assert (no.answer.outcome, no.answer.feedback) == (ApprovalOutcome.REJECTED, "write to docs/")
    assert yes.answer.outcome is ApprovalOutcome.ALLOWED_ALWAYS
    _, out, _ = dsh(*where, "list", "--json")
    assert json.loads(out) == []
    _, out, _ = dsh(*where, "list", "--all", "--json")
    assert {item["state"] for item in json.loads(out)} == {TicketState.ANSWERED.value}


def test_an_unknown_ticket_is_a_clear_error(store: SqliteApprovalStore) -> None:
    code, _, err = dsh("--approvals-store", str(store.path), "approvals", "approve", "t-nope")
    assert code == EXIT_USAGE
    assert "no approval ticket 't-nope'" in err


def test_hostile_text_in_a_ticket_is_shown_inert(store: SqliteApprovalStore) -> None:
    ticket = open_ticket(store, "a\x1b]0;owned\x07.txt", "x\u202e\n")
    where = ("--approvals-store", str(store.path), "approvals")
    for argv in (("list",), ("show", ticket), ("list", "--json")):
        code, out, _ = dsh(*where, *argv)
        assert code == EXIT_OK
        assert "\x1b" not in out
        assert "\u202e" not in out


def test_the_default_store_is_the_workspaces_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("DSH_TOOLS_APPROVALS_URL", raising=False)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    ticket = open_ticket(SqliteApprovalStore.for_workspace(workspace))
    code, out, _ = dsh("--workspace", str(workspace), "approvals", "list")
    assert code == EXIT_OK
    assert out.startswith(ticket)


def test_serving_the_inbox_beyond_loopback_needs_allow_remote(store: SqliteApprovalStore) -> None:
    where = ("--approvals-store", str(store.path), "approvals")
    code, _, err = dsh(*where, "serve", "--host", "0.0.0.0")
    assert code == EXIT_USAGE
    assert "--allow-remote" in err
