"""``dsh-tools --approvals-store URL|FILE`` (or ``$DSH_TOOLS_APPROVALS_URL``): calls are
decided by the answers that store remembers, and a store that cannot be used stops the
command before anything runs."""

from __future__ import annotations

import io
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh_tools import ApprovalKey, ApprovalOutcome
from dsh_tools.cli import EXIT_CALL_FAILED, EXIT_OK, EXIT_USAGE, EXIT_WOULD_ASK, main
from dsh_tools_plugins.approval_store import SqliteApprovalStore

SECRET = "s3cr3t-pa55word"
WRITE = {"path": "out.txt", "content": "hello"}
ARGUMENTS = '{"path": "out.txt", "content": "hello"}'


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    monkeypatch.setenv("DSH_TOOLS_WORKSPACE", str(root))
    monkeypatch.setenv("DSH_TOOLS_RULES", "")
    monkeypatch.delenv("DSH_TOOLS_BLOCK_PLUGINS", raising=False)
    monkeypatch.delenv("DSH_TOOLS_APPROVALS_URL", raising=False)
    return root


def dsh(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdin=io.StringIO(""), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def grant_one_write(store: Any) -> None:
    key = ApprovalKey.for_call("cli", "write_file", WRITE)
    store.remember(key, ApprovalOutcome.ALLOWED_ALWAYS, uses=1)


def test_a_sqlite_store_decides_the_call_and_its_grant_runs_out(
    workspace: Path, tmp_path: Path
) -> None:
    path = tmp_path / "approvals.sqlite3"
    grant_one_write(SqliteApprovalStore(path))
    assert dsh("--approvals-store", str(path), "explain", "write_file", ARGUMENTS)[0] == EXIT_OK
    code, out, _ = dsh("--approvals-store", str(path), "call", "write_file", ARGUMENTS)
    assert code == EXIT_OK, out
    assert (workspace / "out.txt").read_text() == "hello"
    # The one use is taken: the next call asks, and without a terminal nobody answers.
    (workspace / "out.txt").unlink()
    code, out, _ = dsh("--approvals-store", str(path), "call", "write_file", ARGUMENTS)
    assert code == EXIT_CALL_FAILED
    assert "DENIED" in out
    assert not (workspace / "out.txt").exists()
    assert dsh("--approvals-store", str(path), "explain", "write_file", ARGUMENTS)[0] == (
        EXIT_WOULD_ASK
    )


def test_without_a_store_nothing_is_remembered_between_runs(workspace: Path) -> None:
    code, out, _ = dsh("call", "write_file", ARGUMENTS)
    assert code == EXIT_CALL_FAILED
    assert "DENIED" in out


def test_a_postgresql_store_from_the_environment(
    workspace: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dsh_tools_plugins.approval_postgres import PostgresApprovalStore

    store = PostgresApprovalStore(postgres_url)
    grant_one_write(store)
    monkeypatch.setenv("DSH_TOOLS_APPROVALS_URL", postgres_url)
    code, out, _ = dsh("call", "write_file", ARGUMENTS)
    assert code == EXIT_OK, out
    assert store.recall(ApprovalKey.for_call("cli", "write_file", WRITE)) is None  # used up
    store.close()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(
    ("location", "message"),
    [
        (f"postgresql://dsh:{SECRET}@127.0.0.1:{{port}}/approvals", "Connection refused"),
        (f"postgresql://dsh:{SECRET}@db:notaport/approvals", "approval store"),
        (f"mysql://dsh:{SECRET}@db/approvals", "mysql://...: expected a postgresql:// URL"),
        ("{workspace}/approvals.sqlite3", "lies inside the workspace"),
        ("{workspace}", "lies inside the workspace"),
        ("", "expected a postgresql:// URL or the path of a SQLite file"),
    ],
)
@pytest.mark.parametrize("given", ["--approvals-store", "DSH_TOOLS_APPROVALS_URL"])
def test_a_store_that_cannot_be_used_stops_the_command(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, location: str, message: str, given: str
) -> None:
    location = location.format(port=closed_port(), workspace=workspace)
    options = ["--approvals-store", location] if given.startswith("--") else []
    if not options:
        monkeypatch.setenv(given, location)
    code, out, err = dsh(*options, "call", "write_file", ARGUMENTS)
    assert code == EXIT_USAGE
    assert err.startswith(f"dsh-tools: error: {given}: ")
    assert message in err
    assert SECRET not in err + out
    assert list(workspace.iterdir()) == []


def test_a_ticket_on_postgresql_is_approved_from_the_command_line(
    workspace: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deploy_calls import deploy, make_registry
    from dsh_tools_plugins.approval_postgres import PostgresApprovalStore

    store = PostgresApprovalStore(postgres_url)
    registry, _, ran = make_registry(store)
    registry.approval = lambda request: "pending"
    asked = registry.execute_sync(deploy())
    assert asked.error.info.code == "APPROVAL_PENDING"
    ticket = asked.meta["approval"]["ticket"]
    monkeypatch.setenv("DSH_TOOLS_APPROVALS_URL", postgres_url)
    code, out, err = dsh("approvals", "approve", ticket, "--by", "ana")
    assert code == EXIT_OK, out + err
    assert registry.resume_sync(ticket).text == "deployed"
    assert ran == ["web"]
    code, out, err = dsh("approvals", "approve", ticket, "--by", "bo")
    assert code == EXIT_CALL_FAILED
    assert "already answered (allowed-once by ana via cli)" in err
    # The store it read is named, and never with its password.
    assert f"approval store {store.url}, named by $DSH_TOOLS_APPROVALS_URL)" in err
    store.close()


def test_without_psycopg_the_hint_installs_the_extra_as_every_other_hint(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg fails
    code, _out, err = dsh("--approvals-store", "postgresql://dsh@db/approvals", "approvals", "list")
    assert code == EXIT_USAGE
    assert err == (
        "dsh-tools: error: --approvals-store: the PostgreSQL approval store needs psycopg: "
        "install dsh-tools with its postgres extra (in a clone: pip install '.[postgres]')\n"
    )


def test_init_store_creates_the_postgresql_schema_the_workers_then_only_check(
    workspace: Path, empty_postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dsh_tools_plugins.approval_postgres import PostgresApprovalStore

    shown = PostgresApprovalStore(empty_postgres_url).url
    code, out, err = dsh("--approvals-store", empty_postgres_url, "approvals", "list")
    assert code == EXIT_USAGE
    assert err.startswith(f"dsh-tools: error: --approvals-store: approval store {shown}: no ")
    assert "`dsh-tools approvals init-store --approvals-store URL`" in err
    code, out, err = dsh("approvals", "init-store", "--approvals-store", empty_postgres_url)
    assert (code, err) == (EXIT_OK, "")
    assert out == (
        f"approval store {shown}, named by --approvals-store\n"
        "approvals: created at version 2\n"
        "limits: created at version 1\n"
        "journal: created at version 1\n"
    )
    monkeypatch.setenv("DSH_TOOLS_APPROVALS_URL", empty_postgres_url)
    code, out, err = dsh("approvals", "init-store", "--json")
    assert code == EXIT_OK, err
    assert '"found": 2' in out
    assert dsh("approvals", "list") == (EXIT_OK, "no approval tickets waiting\n", "")


def test_init_store_on_a_sqlite_file_opens_it_and_its_schema_is_made(
    workspace: Path, tmp_path: Path
) -> None:
    path = tmp_path / "state" / "approvals.sqlite3"
    code, out, err = dsh("--approvals-store", str(path), "approvals", "init-store")
    assert (code, err) == (EXIT_OK, "")
    assert out == f"approval store {path}, named by --approvals-store\n"
    assert SqliteApprovalStore(path).list_tickets() == []


def test_prune_drops_the_journal_s_old_finished_entries(workspace: Path, tmp_path: Path) -> None:
    from dsh_tools.approvals import JournalEntry, JournalState, call_digest

    path = tmp_path / "approvals.sqlite3"
    store = SqliteApprovalStore(path)
    digest = call_digest("charge", {})
    for key in ("done", "running"):
        assert store.begin_call(JournalEntry("a", key, "charge", digest, key, "o"), 600).started
    assert store.finish_call("a", "done", "o", "charged")
    code, out, err = dsh("--approvals-store", str(path), "approvals", "prune")
    assert (code, err) == (EXIT_OK, "")  # finished within the week: kept
    assert out == (
        f"approval store {path}, named by --approvals-store: 0 finished journal entries "
        "older than 7d pruned\n"
    )
    code, out, _ = dsh("--approvals-store", str(path), "approvals", "prune", "--older-than", "0s")
    assert code == EXIT_OK
    assert ": 1 finished journal entries older than 0s pruned" in out
    assert store.get_call("a", "done") is None
    assert store.get_call("a", "running").state is JournalState.STARTED  # never pruned
    code, out, err = dsh(
        "--approvals-store", str(path), "approvals", "prune", "--older-than", "a week"
    )
    assert code == EXIT_USAGE
    assert "--older-than: 'a week' is not a duration" in err
