"""The SQLite approval store: answers survive a registry and a process, several threads
and registries share one file, and a locked or corrupt file fails closed."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from deploy_calls import code, deploy, make_registry
from dsh_tools import (
    ApprovalAnswer,
    ApprovalKey,
    ApprovalOutcome,
)
from dsh_tools_plugins._stores.sqlite_schema import SCHEMA_VERSION
from dsh_tools_plugins.approval_store import (
    ApprovalStoreError,
    SqliteApprovalStore,
    approvals_directory,
)


def test_two_registries_on_one_file_share_remembered_answers(tmp_path: Path) -> None:
    path = tmp_path / "approvals.sqlite3"
    first, first_approval, first_ran = make_registry(SqliteApprovalStore(path))
    second, second_approval, second_ran = make_registry(SqliteApprovalStore(path))
    first_approval.answer("allowed-always", ApprovalAnswer("rejected-always", any_arguments=True))
    assert code(first.execute_sync(deploy("web"))) == "ok"
    assert code(first.execute_sync(deploy("db", agent="intern"))) == "DENIED"
    assert code(second.execute_sync(deploy("web"))) == "ok"
    assert code(second.execute_sync(deploy("cache", agent="intern"))) == "DENIED"
    assert code(second.execute_sync(deploy("db"))) == "DENIED"  # not remembered: asks
    assert len(second_approval.requests) == 1
    assert (first_ran, second_ran) == (["web"], ["web"])


def test_answers_survive_a_process_restart(tmp_path: Path) -> None:
    path = tmp_path / "approvals.sqlite3"
    script = textwrap.dedent(
        """
        import sys
        from dsh_tools import ApprovalKey, ApprovalOutcome
        from dsh_tools_plugins.approval_store import SqliteApprovalStore

        store = SqliteApprovalStore(sys.argv[1])
        key = ApprovalKey.for_call("ops", "deploy", {"service": "web"})
        store.remember(key, ApprovalOutcome.ALLOWED_ALWAYS)
        """
    )
    subprocess.run([sys.executable, "-c", script, str(path)], check=True, timeout=60)
    registry, approval, ran = make_registry(SqliteApprovalStore(path))
    assert code(registry.execute_sync(deploy("web"))) == "ok"
    assert code(registry.execute_sync(deploy("web", agent="other"))) == "DENIED"
    assert len(approval.requests) == 1
    assert ran == ["web"]


def test_several_processes_write_one_file_at_once(tmp_path: Path) -> None:
    path = tmp_path / "approvals.sqlite3"
    script = textwrap.dedent(
        """
        import sys
        from dsh_tools import ApprovalKey, ApprovalOutcome
        from dsh_tools_plugins.approval_store import SqliteApprovalStore

        store = SqliteApprovalStore(sys.argv[1])
        for n in range(40):
            key = ApprovalKey.for_call(sys.argv[2], "deploy", {"n": n})
            store.remember(key, ApprovalOutcome.REJECTED_ALWAYS)
            assert store.recall(key) is ApprovalOutcome.REJECTED_ALWAYS
        """
    )
    processes = [
        subprocess.Popen([sys.executable, "-c", script, str(path), f"agent-{index}"])
        for index in range(3)
    ]
    assert [process.wait(timeout=120) for process in processes] == [0, 0, 0]
    rows = sqlite3.connect(path).execute("SELECT COUNT(*) FROM approvals").fetchone()
    assert rows == (120,)


def test_text_sqlite_cannot_store_fails_as_a_store_error(tmp_path: Path) -> None:
    store = SqliteApprovalStore(tmp_path / "approvals.sqlite3")
    with pytest.raises(ApprovalStoreError, match="surrogates not allowed"):
        store.recall(ApprovalKey.for_tool("agent-\udc80", "deploy"))


def test_several_threads_remember_and_recall_on_one_file(tmp_path: Path) -> None:
    store = SqliteApprovalStore(tmp_path / "approvals.sqlite3")
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            for round_ in range(20):
                key = ApprovalKey.for_call(f"agent-{index}", "deploy", {"n": round_})
                store.remember(key, ApprovalOutcome.ALLOWED_ALWAYS)
                assert store.recall(key) is ApprovalOutcome.ALLOWED_ALWAYS
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(index,)) for index in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    rows = sqlite3.connect(store.path).execute("SELECT COUNT(*) FROM approvals").fetchone()
    assert rows == (120,)


def test_a_locked_file_fails_closed(tmp_path: Path) -> None:
    path = tmp_path / "approvals.sqlite3"
    store = SqliteApprovalStore(path, timeout_s=0.05)
    registry, approval, ran = make_registry(store)
    store.forget()  # creates the file
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        # Recall fails, and so does looking for the call's approval ticket: a store that
        # cannot be read never allows, and the call fails naming it.
        approval.answer("allowed-always")
        result = registry.execute_sync(deploy())
        assert code(result) == "POLICY_ERROR"
        assert "approval store SqliteApprovalStore failed to find a ticket" in result.error.message
        assert "database is locked" in result.error.message
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert ran == []
    assert approval.requests == []


def test_a_corrupt_file_fails_closed(tmp_path: Path) -> None:
    path = tmp_path / "approvals.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    store = SqliteApprovalStore(path)
    with pytest.raises(ApprovalStoreError, match=r"approvals\.sqlite3: file is not a database"):
        store.recall(ApprovalKey.for_tool("ops", "deploy"))
    registry, approval, ran = make_registry(store)
    approval.answer("allowed-always")
    assert code(registry.execute_sync(deploy())) == "POLICY_ERROR"
    assert ran == []


def test_a_foreign_or_tampered_file_is_refused(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.sqlite3"
    with sqlite3.connect(foreign) as connection:
        connection.execute("PRAGMA user_version = 7")
    newer = f"schema version 7, expected at most {SCHEMA_VERSION}"
    with pytest.raises(ApprovalStoreError, match=newer):
        SqliteApprovalStore(foreign).recall(ApprovalKey.for_tool("ops", "deploy"))

    store = SqliteApprovalStore(tmp_path / "approvals.sqlite3")
    key = ApprovalKey.for_tool("ops", "deploy")
    store.remember(key, ApprovalOutcome.REJECTED_ALWAYS)
    with sqlite3.connect(store.path) as connection:
        connection.execute("UPDATE approvals SET outcome = 'allowed-once'")
    with pytest.raises(ApprovalStoreError, match="unknown outcome 'allowed-once'"):
        store.recall(key)


def test_one_file_per_workspace_outside_it(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    first, second = tmp_path / "one", tmp_path / "two"
    first.mkdir()
    second.mkdir()
    (tmp_path / "link").symlink_to(first)
    store = SqliteApprovalStore.for_workspace(first)
    assert store.path.parent == approvals_directory() == tmp_path / "state/dsh-tools/approvals"
    assert SqliteApprovalStore.for_workspace(tmp_path / "link").path == store.path
    assert SqliteApprovalStore.for_workspace(second).path != store.path
    store.remember(ApprovalKey.for_tool("ops", "deploy"), ApprovalOutcome.ALLOWED_ALWAYS)
    assert store.path.is_file()
    assert list(first.iterdir()) == []


def test_forget_drops_one_agent_or_all(tmp_path: Path) -> None:
    store = SqliteApprovalStore(tmp_path / "approvals.sqlite3")
    ops, dev = ApprovalKey.for_tool("ops", "deploy"), ApprovalKey.for_tool("ops/dev", "deploy")
    store.remember(ops, ApprovalOutcome.ALLOWED_ALWAYS)
    store.remember(dev, ApprovalOutcome.REJECTED_ALWAYS)
    store.forget("ops")
    assert (store.recall(ops), store.recall(dev)) == (None, ApprovalOutcome.REJECTED_ALWAYS)
    store.forget()
    assert store.recall(dev) is None
    with pytest.raises(ValueError, match="not 'allowed-once'"):
        store.remember(ops, ApprovalOutcome.ALLOWED_ONCE)

    class _Str(str):
        pass

    with pytest.raises(ValueError, match="_Str'"):
        store.remember(ops, _Str("allowed-always"))  # type: ignore[arg-type]


V1_TABLE = (
    "CREATE TABLE approvals (agent TEXT NOT NULL, tool TEXT NOT NULL, "
    "arguments_sha256 TEXT NOT NULL, outcome TEXT NOT NULL, remembered_at REAL NOT NULL, "
    "PRIMARY KEY (agent, tool, arguments_sha256))"
)


def write_version_1_file(path: Path) -> list[ApprovalKey]:
    """A file as version 1 of the store wrote it, with three answers."""
    keys = [ApprovalKey.for_call("ops", "deploy", {"n": n}) for n in range(3)]
    with sqlite3.connect(path) as connection:
        connection.execute(V1_TABLE)
        for key in keys:
            connection.execute(
                "INSERT INTO approvals VALUES (?, ?, ?, 'allowed-always', 1.0)",
                (key.agent, key.tool_name, key.arguments_sha256),
            )
        connection.execute("PRAGMA user_version = 1")
    connection.close()
    return keys


def test_a_version_1_file_is_upgraded_in_place_keeping_every_answer(tmp_path: Path) -> None:
    path = tmp_path / "approvals.sqlite3"
    keys = write_version_1_file(path)
    store = SqliteApprovalStore(path)
    assert [store.recall(key) for key in keys] == [ApprovalOutcome.ALLOWED_ALWAYS] * 3
    # Old answers never end; new ones may.
    assert [store.use(keys[0]) for _ in range(3)] == [ApprovalOutcome.ALLOWED_ALWAYS] * 3
    store.remember(keys[1], ApprovalOutcome.ALLOWED_ALWAYS, uses=1)
    assert [store.use(keys[1]) for _ in range(2)] == [ApprovalOutcome.ALLOWED_ALWAYS, None]
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert connection.execute("SELECT COUNT(*) FROM approvals").fetchone() == (3,)
    connection.close()


def test_processes_opening_a_version_1_file_at_once_upgrade_it_once(tmp_path: Path) -> None:
    path = tmp_path / "approvals.sqlite3"
    keys = write_version_1_file(path)
    script = textwrap.dedent(
        """
        import sys
        from dsh_tools import ApprovalKey, ApprovalOutcome
        from dsh_tools_plugins.approval_store import SqliteApprovalStore

        store = SqliteApprovalStore(sys.argv[1], timeout_s=60)
        key = ApprovalKey.for_call("ops", "deploy", {"n": 0})
        assert store.recall(key) is ApprovalOutcome.ALLOWED_ALWAYS
        """
    )
    processes = [subprocess.Popen([sys.executable, "-c", script, str(path)]) for _ in range(4)]
    assert [process.wait(timeout=120) for process in processes] == [0] * 4
    assert SqliteApprovalStore(path).recall(keys[2]) is ApprovalOutcome.ALLOWED_ALWAYS


def test_a_failed_upgrade_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "approvals.sqlite3"
    write_version_1_file(path)
    with sqlite3.connect(path) as connection:
        # Someone added the column by hand: the upgrade's ALTER TABLE fails.
        connection.execute("ALTER TABLE approvals ADD COLUMN uses_left INTEGER")
    connection.close()
    with pytest.raises(ApprovalStoreError, match="duplicate column name: uses_left"):
        SqliteApprovalStore(path).recall(ApprovalKey.for_tool("ops", "deploy"))
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA user_version").fetchone() == (1,)
        columns = [row[1] for row in connection.execute("PRAGMA table_info(approvals)")]
        assert "expires_at" not in columns
        assert connection.execute("SELECT COUNT(*) FROM approvals").fetchone() == (3,)
    connection.close()


_KEY = ApprovalKey.for_tool("ops", "deploy")
ALWAYS = ApprovalOutcome.ALLOWED_ALWAYS


@pytest.mark.parametrize("layout", ["workspace is home", "state inside workspace"])
def test_a_store_directory_inside_the_workspace_is_refused(
    tmp_path: Path, monkeypatch: Any, layout: str
) -> None:
    """A command could insert an "always allowed" row into a store it can write."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    if layout == "workspace is home":
        monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_STATE_HOME", str(home / "project" / ".state"))
    workspace = home if layout == "workspace is home" else home / "project"
    workspace.mkdir(exist_ok=True)
    store = SqliteApprovalStore.for_workspace(workspace)
    for operation in (lambda: store.recall(_KEY), lambda: store.remember(_KEY, ALWAYS)):
        with pytest.raises(ApprovalStoreError) as info:
            operation()
        assert f"approval store {store.path}: it is inside {workspace}, " in str(info.value)
        assert "keep it outside the workspace" in str(info.value)
    assert not store.path.exists()


def test_an_explicit_store_path_inside_the_workspace_is_refused(
    tmp_path: Path, monkeypatch: Any
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    inside = SqliteApprovalStore.for_workspace(workspace, directory=workspace / ".approvals")
    monkeypatch.setenv("DSH_TOOLS_WORKSPACE", str(workspace))
    plain = SqliteApprovalStore(workspace / "approvals.sqlite3")
    for store in (inside, plain):
        with pytest.raises(ApprovalStoreError, match="which sandboxed commands"):
            store.remember(_KEY, ALWAYS)
        assert not store.path.exists()


@pytest.mark.parametrize("swap", ["last", "parent"])
def test_a_store_reached_through_a_link_is_refused(tmp_path: Path, swap: str) -> None:
    directory = tmp_path / "state"
    store = SqliteApprovalStore.for_workspace(tmp_path / "ws", directory=directory)
    store.remember(_KEY, ALWAYS)
    if swap == "last":  # the file swapped for a link to another store
        store.path.rename(tmp_path / "other.sqlite3")
        store.path.symlink_to(tmp_path / "other.sqlite3")
        link = store.path
    else:  # the folder renamed and a relative link left in its place
        directory.rename(tmp_path / "moved")
        directory.symlink_to("moved")
        link = directory
    with pytest.raises(ApprovalStoreError, match="a symbolic link") as info:
        store.recall(_KEY)
    assert str(link) in str(info.value)


def test_the_store_directory_is_private(tmp_path: Path) -> None:
    store = SqliteApprovalStore(tmp_path / "a" / "b" / "approvals.sqlite3")
    store.remember(_KEY, ALWAYS)
    assert (tmp_path / "a" / "b").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o700
