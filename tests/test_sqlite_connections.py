"""The SQLite store keeps one connection per thread between operations, and never one it
must not use: after a fork, after the file at its path changed, after an operation
that failed."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dsh_tools import ApprovalOutcome
from dsh_tools.approvals import ApprovalKey, JournalEntry, JournalState, TicketAnswer, TicketError
from dsh_tools_plugins.approval_store import ApprovalStoreError, SqliteApprovalStore
from store_contract import entry

ALWAYS = ApprovalOutcome.ALLOWED_ALWAYS


def _key(tool: str) -> ApprovalKey:
    return ApprovalKey("coder", tool, None)


def _count_connections(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The threads that opened a connection for an operation, one entry per opening."""
    opened: list[str] = []
    real = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> Any:
        opened.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", connect)
    return opened


def test_a_thread_s_operations_share_one_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqliteApprovalStore(tmp_path / "a.sqlite3")
    store.recall(_key("warm"))  # the file is made, and this thread's connection opened
    opened = _count_connections(monkeypatch)
    for n in range(5):
        store.remember(_key(f"t{n}"), ALWAYS)
    assert [store.recall(_key(f"t{n}")) for n in range(5)] == [ALWAYS] * 5
    assert opened == []

    other = threading.Thread(target=lambda: store.recall(_key("t0")), name="other")
    other.start()
    other.join()
    assert opened == ["other"]  # a thread of its own, a connection of its own


def test_a_file_replaced_under_the_store_is_opened_anew(tmp_path: Path) -> None:
    """A write after the file at the path was replaced lands in the file now there, not
    in the one the kept connection had open."""
    path = tmp_path / "a.sqlite3"
    store = SqliteApprovalStore(path)
    store.remember(_key("before"), ALWAYS)
    shutil.copyfile(path, tmp_path / "copy.sqlite3")
    os.replace(tmp_path / "copy.sqlite3", path)

    store.remember(_key("after"), ALWAYS)

    reader = SqliteApprovalStore(path)
    assert reader.recall(_key("before")) is ALWAYS
    assert reader.recall(_key("after")) is ALWAYS


def test_a_deleted_file_is_not_written_through_a_kept_connection(tmp_path: Path) -> None:
    path = tmp_path / "a.sqlite3"
    store = SqliteApprovalStore(path)
    store.remember(_key("before"), ALWAYS)
    path.unlink()
    with pytest.raises(ApprovalStoreError, match="no such table"):
        store.remember(_key("after"), ALWAYS)  # the new, empty file: refused, never lost


def test_a_failed_operation_leaves_no_transaction_or_lock_behind(tmp_path: Path) -> None:
    path = tmp_path / "a.sqlite3"
    store = SqliteApprovalStore(path, timeout_s=0.2)
    store.recall(_key("warm"))
    with pytest.raises(TicketError):  # raised inside its transaction, which is undone
        store.answer_ticket(
            "no-such-ticket", TicketAnswer(ApprovalOutcome.ALLOWED_ONCE, "ana", "cli")
        )

    store.remember(_key("next"), ALWAYS)  # no "transaction within a transaction"
    SqliteApprovalStore(path, timeout_s=0.2).remember(_key("other"), ALWAYS)  # no lock held
    assert store.recall(_key("other")) is ALWAYS


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads running
def test_a_forked_child_never_uses_its_parent_s_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server forked into workers after its store was used: each side writes through a
    connection of its own, and both writes are in the file."""
    path = tmp_path / "a.sqlite3"
    store = SqliteApprovalStore(path)
    store.remember(_key("parent, before"), ALWAYS)
    opened = _count_connections(monkeypatch)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's side, reported through the pipe
        try:
            store.remember(_key("child"), ALWAYS)
            os.write(write, str(len(opened)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        childs_openings = pipe.read()
    os.waitpid(child, 0)
    store.remember(_key("parent, after"), ALWAYS)

    assert childs_openings == "1"  # the child opened its own
    assert opened == []  # the parent kept its one
    reader = SqliteApprovalStore(path)
    for tool in ("parent, before", "child", "parent, after"):
        assert reader.recall(_key(tool)) is ALWAYS, tool


def test_a_commit_refused_by_a_reader_s_lock_leaves_nothing_open(tmp_path: Path) -> None:
    """A transaction whose commit waited out another connection's read lock fails, and
    the store's next operation starts clean (the failed one was undone, not kept open)."""
    path = tmp_path / "a.sqlite3"
    store = SqliteApprovalStore(path, timeout_s=0.1)
    store.recall(_key("warm"))
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT * FROM call_journal").fetchall()  # holds its read lock
    with pytest.raises(ApprovalStoreError, match="locked"):
        store.begin_call(entry(key="refused"), 60.0)
    reader.execute("COMMIT")
    reader.close()

    assert store.begin_call(entry(key="next"), 60.0).started
    assert store.get_call("coder", "refused") is None
    assert store.get_call("coder", "next") is not None


WRITER = """
import sys
from dsh_tools.approvals import JournalEntry
from dsh_tools_plugins.approval_store import SqliteApprovalStore

store = SqliteApprovalStore(sys.argv[1], timeout_s=30)
print("writing", flush=True)
n = 0
while True:  # one kept connection, one write transaction after another, until killed
    n += 1
    key = f"{sys.argv[2]}-{n}"
    store.begin_call(JournalEntry("coder", key, "write", "0" * 64, key, "w"), 60.0)
    store.finish_call("coder", key, "w", "done")
"""


def test_writers_killed_mid_write_leave_the_kept_connections_working(tmp_path: Path) -> None:
    """Kill it and look: processes writing through kept connections are killed with
    SIGKILL at arbitrary moments (inside a write transaction, often); the survivor's
    kept connection goes on, each of its writes is there once, and the file is sound."""
    path = tmp_path / "a.sqlite3"
    store = SqliteApprovalStore(path, timeout_s=30)
    store.recall(_key("warm"))
    written: list[str] = []
    for round_ in range(5):
        with subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), f"w{round_}"],
            stdout=subprocess.PIPE,
            text=True,
        ) as writer:
            assert writer.stdout is not None
            assert writer.stdout.readline().strip() == "writing"
            for n in range(5):  # the survivor writes while the writer does
                key = f"s{round_}-{n}"
                assert store.begin_call(
                    JournalEntry("coder", key, "write", "1" * 64, key, "s"), 60.0
                ).started
                assert store.finish_call("coder", key, "s", "done")
                written.append(key)
            time.sleep(0.01 * round_)
            writer.send_signal(signal.SIGKILL)
            writer.wait()

    entries = store.list_calls(agent="coder")
    assert len({e.key.split("-")[0] for e in entries if e.owner == "w"}) >= 3  # they wrote
    assert sorted(e.key for e in entries if e.owner == "s") == sorted(written)
    assert all(store.get_call("coder", key).state is JournalState.FINISHED for key in written)
    check = sqlite3.connect(path)
    assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    check.close()
