"""A durable approval store: remembered approvals in one SQLite file per workspace.

:class:`SqliteApprovalStore` implements :class:`dsh_tools.approvals.ApprovalStore` with
the standard library's ``sqlite3``. Pass it where the approval service is configured::

    store = SqliteApprovalStore.for_workspace(root)
    registry = ToolRegistry(approval=service, approval_store=store)

Each operation opens its own connection and closes it, so one store may be used from
several threads, and several registries and processes may share one file: SQLite's file
locks order their writes, and a write is committed before :meth:`~SqliteApprovalStore.
remember` returns. A file that is locked for longer than ``timeout_s``, corrupt, or not an
approval store makes the operation raise :class:`ApprovalStoreError`; the pipeline then
fails closed (a failed recall asks the approval service again, a failed write fails the
call with ``POLICY_ERROR``).

:meth:`SqliteApprovalStore.for_workspace` keeps the file *outside* the workspace, in the
user's state directory (``$XDG_STATE_HOME/dsh-tools/approvals``, else
``~/.local/state/dsh-tools/approvals``), named by a hash of the workspace's real path: a
file inside the workspace could be written by the very agent whose calls it approves.
Before each connection the file is checked as a host file
(:func:`dsh_tools.hostfiles.check_host_file`): no symbolic link on its path, a regular
file if it exists, and nowhere inside the workspace (the current one,
``$DSH_TOOLS_WORKSPACE`` or the current directory, and for :meth:`~SqliteApprovalStore.
for_workspace` the ``root`` it was given); missing folders are made with mode ``0700``.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from pathlib import Path

from dsh_tools.approvals import (
    REMEMBERED_OUTCOMES,
    ApprovalKey,
    exact_outcome,
    remembered_outcome,
)
from dsh_tools.hostfiles import HostFileError, check_host_file, writable_trees
from dsh_tools.models import ApprovalOutcome

__all__ = ["ApprovalStoreError", "SqliteApprovalStore", "approvals_directory"]

_SCHEMA_VERSION = 1
_ANY_ARGUMENTS = "*"
"""The ``arguments_sha256`` column of an answer widened to the tool (a primary key column
cannot be NULL and stay unique)."""


class ApprovalStoreError(Exception):
    """The approval store's file could not be read or written."""


def approvals_directory() -> Path:
    """Where :meth:`SqliteApprovalStore.for_workspace` keeps its files."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
    return Path(state) / "dsh-tools" / "approvals"


class SqliteApprovalStore:
    """Remembered approvals in the SQLite file ``path`` (created on first use).

    :param timeout_s: how long an operation waits for another connection's lock before it
        fails (closed).
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = 5.0) -> None:
        self.path = Path(path)
        self.timeout_s = timeout_s
        self._trees = writable_trees()
        self._ready = False
        self._ready_lock = threading.Lock()

    @classmethod
    def for_workspace(
        cls, root: str | os.PathLike[str], *, directory: str | os.PathLike[str] | None = None
    ) -> SqliteApprovalStore:
        """The store of the workspace at ``root``: one file per workspace, kept in
        ``directory`` (default :func:`approvals_directory`), never inside the workspace:
        a directory inside it (the workspace is ``$HOME``, or ``$XDG_STATE_HOME`` lies in
        it) fails every operation with :class:`ApprovalStoreError`."""
        real = os.path.realpath(root)
        name = hashlib.sha256(os.fsencode(real)).hexdigest()[:32] + ".sqlite3"
        store = cls(Path(directory or approvals_directory()) / name)
        store._trees = (*store._trees, real)
        return store

    def recall(self, key: ApprovalKey) -> ApprovalOutcome | None:
        rows = self._run(
            "SELECT outcome FROM approvals WHERE agent = ? AND tool = ? AND arguments_sha256 = ?",
            _columns(key),
        )
        if not rows:
            return None
        outcome = exact_outcome(rows[0][0])
        if outcome not in REMEMBERED_OUTCOMES:
            raise ApprovalStoreError(f"{self.path} holds an unknown outcome {rows[0][0]!r}")
        return outcome

    def remember(self, key: ApprovalKey, outcome: ApprovalOutcome) -> None:
        kept = remembered_outcome(outcome)
        self._run(
            "INSERT OR REPLACE INTO approvals "
            "(agent, tool, arguments_sha256, outcome, remembered_at) VALUES (?, ?, ?, ?, ?)",
            (*_columns(key), kept.value, time.time()),
        )

    def forget(self, agent: str | None = None) -> None:
        """Drop every remembered answer, or those of ``agent`` (and of no other scope)."""
        if agent is None:
            self._run("DELETE FROM approvals", ())
        else:
            self._run("DELETE FROM approvals WHERE agent = ?", (agent,))

    # ------------------------------------------------------------------ file

    def _run(self, statement: str, parameters: tuple[object, ...]) -> list[tuple[object, ...]]:
        """One statement in a transaction of its own, on a connection of its own."""
        try:
            check_host_file(self.path, what="approval store", trees=self._trees, make_parents=0o700)
        except HostFileError as error:
            raise ApprovalStoreError(str(error)) from None
        try:
            self._prepare()
            connection = sqlite3.connect(self.path, timeout=self.timeout_s)
            try:
                with connection:
                    return connection.execute(statement, parameters).fetchall()
            finally:
                connection.close()
        except (sqlite3.Error, OSError, ValueError) as error:  # ValueError: unencodable text
            raise ApprovalStoreError(f"approval store {self.path}: {error}") from None

    def _prepare(self) -> None:
        """Create the file and its table once per store; refuse a file of another kind."""
        if self._ready:
            return
        with self._ready_lock:
            if self._ready:
                return
            connection = sqlite3.connect(self.path, timeout=self.timeout_s)
            try:
                with connection:
                    version = connection.execute("PRAGMA user_version").fetchone()[0]
                    if version not in (0, _SCHEMA_VERSION):
                        raise ApprovalStoreError(
                            f"approval store {self.path}: schema version {version}, expected "
                            f"{_SCHEMA_VERSION}"
                        )
                    connection.execute(
                        "CREATE TABLE IF NOT EXISTS approvals (agent TEXT NOT NULL, "
                        "tool TEXT NOT NULL, arguments_sha256 TEXT NOT NULL, "
                        "outcome TEXT NOT NULL, remembered_at REAL NOT NULL, "
                        "PRIMARY KEY (agent, tool, arguments_sha256))"
                    )
                    connection.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
            finally:
                connection.close()
            self._ready = True


def _columns(key: ApprovalKey) -> tuple[str, str, str]:
    return key.agent, key.tool_name, key.arguments_sha256 or _ANY_ARGUMENTS
