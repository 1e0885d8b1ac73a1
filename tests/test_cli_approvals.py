"""``dsh-tools approvals``: a person lists, reads, approves and rejects the tickets of calls
that wait for them, from another process than the one that asked."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from approval_helpers import add_write_tool, code
from dsh_tools import Ask, ToolExecutionInput, ToolRegistry, hookimpl
from dsh_tools.cli import EXIT_CALL_FAILED, EXIT_OK, EXIT_USAGE, main
from dsh_tools_plugins.approval_store import SqliteApprovalStore


class AskAlways:
    @hookimpl
    def dsh_tools_pre_execute(self, execution: Any) -> Ask:
        return Ask("writes \x1b]0;pwned\x07files", detail={"rule": "ask write"})


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workspace, and a state directory outside it for the approval store."""
    root = tmp_path / "workspace"
    root.mkdir()
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("DSH_TOOLS_WORKSPACE", str(root))
    monkeypatch.delenv("DSH_TOOLS_APPROVALS_URL", raising=False)
    monkeypatch.setenv("DSH_TOOLS_RULES", "")
    return root


def host(workspace: Path) -> tuple[ToolRegistry, list[str]]:
    """The host that asks: its approval store is the workspace's, outside it."""
    store = SqliteApprovalStore.for_workspace(workspace)
    registry = ToolRegistry(approval=lambda request: "pending", approval_store=store)
    ran = add_write_tool(registry)
    registry.add_plugin(AskAlways(), name="permissions")
    return registry, ran


def dsh(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    exit_code = main(["--no-plugins", *argv], stdout=out, stderr=err)
    return exit_code, out.getvalue() + err.getvalue()


CALL = ToolExecutionInput("c1", "write", {"path": "a.txt"}, agent="coder")


def again(n: int) -> ToolExecutionInput:
    """The same call made again by the model: a new call id (a repeat of the same call
    id is the same call, which the call journal replays)."""
    return ToolExecutionInput(f"c1-{n}", "write", {"path": "a.txt"}, agent="coder")


def test_list_show_and_approve_then_the_repeated_call_runs_once(workspace: Path) -> None:
    registry, ran = host(workspace)
    ticket = registry.execute_sync(CALL).meta["approval"]["ticket"]  # type: ignore[index]

    exit_code, listed = dsh("approvals", "list")
    assert exit_code == EXIT_OK
    assert ticket in listed
    assert "coder write" in listed
    assert "\x1b" not in listed
    assert "\\x1b]0;pwned\\x07" in listed

    exit_code, shown = dsh("approvals", "show", ticket)
    assert exit_code == EXIT_OK
    assert "write" in shown
    assert "a.txt" in shown
    assert "asked by plugin permissions, rule ask write" in shown

    exit_code, said = dsh("approvals", "approve", ticket, "--by", "ana")
    assert (exit_code, said) == (EXIT_OK, f"{ticket}: allowed-once by ana\n")
    exit_code, late = dsh("approvals", "reject", ticket)
    assert exit_code == EXIT_CALL_FAILED
    assert "too late" in late

    assert code(registry.execute_sync(CALL)) == "ok"
    replayed = registry.resume_sync(ticket)  # the same call again: its recorded result
    assert (code(replayed), replayed.meta) == ("ok", {"journal": "replayed"})
    assert ran == ["a.txt"]
    exit_code, listed = dsh("approvals", "list")
    assert "no approval tickets waiting" in listed
    exit_code, everything = dsh("approvals", "list", "--all", "--json")
    (entry,) = json.loads(everything)
    assert (entry["id"], entry["state"], entry["answer"]["by"]) == (ticket, "resumed", "ana")
    assert entry["answer"]["channel"] == "cli"
    assert code(registry.execute_sync(again(1))) == "APPROVAL_PENDING"  # a new call asks


def test_reject_with_feedback_reaches_the_model(workspace: Path) -> None:
    registry, ran = host(workspace)
    ticket = registry.execute_sync(CALL).meta["approval"]["ticket"]  # type: ignore[index]
    exit_code, said = dsh("approvals", "reject", ticket, "--feedback", "use b.txt", "--json")
    assert exit_code == EXIT_OK
    assert json.loads(said)["answer"]["outcome"] == "rejected"
    result = registry.execute_sync(CALL)
    assert result.error.message == 'the user rejected tool "write": use b.txt'
    assert ran == []


def test_approve_always_is_remembered_for_later_calls(workspace: Path) -> None:
    registry, ran = host(workspace)
    ticket = registry.execute_sync(CALL).meta["approval"]["ticket"]  # type: ignore[index]
    assert dsh("approvals", "approve", ticket, "--always")[0] == EXIT_OK
    assert code(registry.execute_sync(again(1))) == "ok"
    assert code(registry.execute_sync(again(2))) == "ok"
    assert ran == ["a.txt", "a.txt"]


def test_an_unknown_ticket_is_one_error_naming_the_store_it_read(
    workspace: Path, tmp_path: Path
) -> None:
    store = SqliteApprovalStore.for_workspace(workspace).path
    said_at = f"(approval store {store}, the default store of workspace {workspace})"
    for action in ("show", "approve", "reject"):
        out, err = io.StringIO(), io.StringIO()
        exit_code = main(["--no-plugins", "approvals", action, "t-nope"], stdout=out, stderr=err)
        assert (exit_code, out.getvalue()) == (EXIT_CALL_FAILED, "")
        assert err.getvalue() == (
            f"dsh-tools: error: approval ticket 't-nope' does not exist {said_at}\n"
        )
        exit_code, said = dsh("approvals", action, "t-nope", "--json")
        assert exit_code == EXIT_CALL_FAILED
        assert json.loads(said) == {
            "error": {
                "message": f"approval ticket 't-nope' does not exist {said_at}",
                "code": "NOT_FOUND",
            },
            "exitCode": EXIT_CALL_FAILED,
        }
    assert dsh("approvals", "approve", "t-nope", "--by", " ")[0] == EXIT_USAGE


def test_a_late_answer_is_the_same_kind_of_error_with_its_own_code(workspace: Path) -> None:
    registry, _ = host(workspace)
    ticket = registry.execute_sync(CALL).meta["approval"]["ticket"]  # type: ignore[index]
    assert dsh("approvals", "approve", ticket, "--by", "ana")[0] == EXIT_OK
    exit_code, said = dsh("approvals", "reject", ticket, "--json")
    assert exit_code == EXIT_CALL_FAILED
    error = json.loads(said)["error"]
    assert error["code"] == "ALREADY_ANSWERED"
    assert "was already answered (allowed-once by ana via cli)" in error["message"]
    assert "approval store " in error["message"]


def test_tickets_in_json_name_their_tool_as_the_ticket_does(workspace: Path) -> None:
    registry, _ = host(workspace)
    ticket = registry.execute_sync(CALL).meta["approval"]["ticket"]  # type: ignore[index]
    exit_code, listed = dsh("approvals", "list", "--json")
    assert exit_code == EXIT_OK
    [entry] = json.loads(listed)
    assert (entry["id"], entry["tool_name"]) == (ticket, "write")
    assert "tool" not in entry


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--workspce", "ws", "approvals", "list"], "--workspce (did you mean --workspace?)"),
        (["approvals", "approve", "t-1", "--expries-in", "1h"], "(did you mean --expires-in?)"),
        (["--approval-store", "x", "approvals", "list"], "(did you mean --approvals-store?)"),
    ],
)
def test_a_misspelled_option_is_named_with_the_one_meant(argv: list[str], problem: str) -> None:
    exit_code, said = dsh(*argv)
    assert exit_code == EXIT_USAGE
    assert "dsh-tools: error: unrecognized arguments: " in said
    assert problem in said
    assert "invalid choice" not in said


def test_a_named_store_file_is_used(workspace: Path, tmp_path: Path) -> None:
    path = tmp_path / "elsewhere.sqlite3"
    store = SqliteApprovalStore(path)
    registry = ToolRegistry(approval=lambda request: "pending", approval_store=store)
    add_write_tool(registry)
    registry.add_plugin(AskAlways())
    ticket = registry.execute_sync(CALL).meta["approval"]["ticket"]  # type: ignore[index]
    exit_code, listed = dsh("--approvals-store", str(path), "approvals", "list", "--json")
    assert exit_code == EXIT_OK
    assert [entry["id"] for entry in json.loads(listed)] == [ticket]


def test_serving_the_inbox_beyond_loopback_needs_allow_remote(workspace: Path) -> None:
    exit_code, _ = dsh("approvals", "serve", "--host", "0.0.0.0")
    assert exit_code == EXIT_USAGE


def test_approve_always_may_end_after_uses_or_a_lifetime(workspace: Path) -> None:
    registry, ran = host(workspace)
    ticket = registry.execute_sync(CALL).meta["approval"]["ticket"]  # type: ignore[index]
    argv = ["approvals", "approve", ticket, "--always", "--expires-in", "1h", "--uses", "1"]
    exit_code, said = dsh(*argv, "--feedback", "just this once more", "--json")
    assert exit_code == EXIT_OK
    answer = json.loads(said)["answer"]
    assert (answer["expires_in_s"], answer["uses"]) == (3600.0, 1)
    assert answer["feedback"] == "just this once more"
    assert [code(registry.execute_sync(again(n))) for n in range(3)] == [
        "ok",
        "ok",
        "APPROVAL_PENDING",
    ]
    assert ran == ["a.txt", "a.txt"]
    _, shown = dsh("approvals", "show", ticket)
    assert "ends after 1h or 1 use" in shown


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        (["--always", "--expires-in", "soon"], "--expires-in: 'soon' is not a duration"),
        (["--always", "--expires-in", "1"], "--expires-in: '1' is not a duration: a number and"),
        (["--always", "--expires-in", "0s"], "--expires-in must be a positive"),
        (["--always", "--uses", "0"], "--uses must be at least 1"),
        (["--uses", "2"], "--uses and --expires-in go with --always"),
        (["--expires-in", "5m"], "--uses and --expires-in go with --always"),
    ],
)
def test_a_grant_that_cannot_end_so_is_bad_usage(
    workspace: Path, extra: list[str], problem: str
) -> None:
    registry, _ = host(workspace)
    ticket = registry.execute_sync(CALL).meta["approval"]["ticket"]  # type: ignore[index]
    exit_code, said = dsh("approvals", "approve", ticket, *extra)
    assert exit_code == EXIT_USAGE
    assert problem in said
    assert code(registry.execute_sync(CALL)) == "APPROVAL_PENDING"  # still unanswered


def test_show_prints_every_argument_of_a_call_without_a_card(workspace: Path) -> None:
    from approval_helpers import HIDING, add_deploy_tool, assert_every_argument_shown

    registry, _ = host(workspace)
    add_deploy_tool(registry)
    pending = registry.execute_sync(ToolExecutionInput("c2", "deploy", HIDING, agent="coder"))
    exit_code, shown = dsh("approvals", "show", pending.meta["approval"]["ticket"])  # type: ignore[index]
    assert exit_code == EXIT_OK
    assert_every_argument_shown(shown)


def test_list_and_show_tell_ran_failed_and_died_apart(workspace: Path) -> None:
    from dsh_tools import define_tool
    from dsh_tools.approvals import JournalEntry, call_digest

    def boom(args: Any, ctx: Any) -> None:
        raise OSError("the disk is full")

    registry, _ran = host(workspace)
    registry.register(define_tool(name="boom", description="Boom.", parameters={}, execute=boom))
    store = registry.approval_store
    calls = {
        "ran": ToolExecutionInput("c1", "write", {"path": "a.txt"}, agent="coder"),
        "failed": ToolExecutionInput("c2", "boom", {}, agent="coder"),
        "died": ToolExecutionInput("c3", "write", {"path": "c.txt"}, agent="coder"),
    }
    tickets = {}
    for word, call in calls.items():
        tickets[word] = registry.execute_sync(call).meta["approval"]["ticket"]  # type: ignore[index]
        assert dsh("approvals", "approve", tickets[word])[0] == EXIT_OK
    registry.resume_sync(tickets["ran"])
    registry.resume_sync(tickets["failed"])
    # The third call's process died mid-body: its entry began with the ticket, and its
    # lease ran out.
    digest = call_digest("write", {"path": "c.txt"})
    entry = JournalEntry("coder", "c3", "write", digest, "c3", "host-b:77:gone")
    assert store.begin_call(entry, 0.0, tickets["died"]).started  # type: ignore[attr-defined]
    exit_code, listed = dsh("approvals", "list", "--all")
    assert exit_code == EXIT_OK
    for word, ticket in tickets.items():
        line = next(line for line in listed.splitlines() if line.startswith(ticket))
        assert f"resumed, {word}" in line
    exit_code, everything = dsh("approvals", "list", "--all", "--json")
    outcomes = {item["id"]: item["outcome"] for item in json.loads(everything)}
    assert outcomes == {ticket: word for word, ticket in tickets.items()}
    exit_code, shown = dsh("approvals", "show", tickets["died"])
    assert "the call died: started" in shown
    assert "on host-b:77:gone" in shown
    assert "it may have run" in shown
    exit_code, shown = dsh("approvals", "show", tickets["failed"])
    assert "the call failed (" in shown


def test_a_ticket_shows_an_earlier_attempt_that_may_have_run(workspace: Path) -> None:
    from dsh_tools.approvals import JournalEntry, JournalState, call_digest

    registry, ran = host(workspace)
    store = registry.approval_store
    digest = call_digest("write", {"path": "a.txt"})
    entry = JournalEntry("coder", "c0", "write", digest, "c0", "host-b:77:gone")
    assert store.begin_call(entry, 0.0).started  # type: ignore[attr-defined]
    assert store.get_call("coder", "c0").state is JournalState.UNKNOWN  # type: ignore[attr-defined]
    ticket = registry.execute_sync(CALL).meta["approval"]["ticket"]  # type: ignore[index]
    _exit_code, shown = dsh("approvals", "show", ticket)
    assert "an earlier attempt: call c0 started" in shown
    assert "on host-b:77:gone" in shown
    assert "it may have run" in shown
    assert "earlier_attempt" not in shown  # one line of its own, not the raw record
    assert dsh("approvals", "approve", ticket)[0] == EXIT_OK
    assert code(registry.execute_sync(again(1))) == "ok"  # the person settled it
    assert ran == ["a.txt"]
