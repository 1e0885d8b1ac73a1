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
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from dsh_tools.approvals import (
    REMEMBERED_OUTCOMES,
    ApprovalKey,
    ApprovalTicket,
    TicketAnswer,
    TicketError,
    TicketState,
    exact_outcome,
    remembered_outcome,
)
from dsh_tools.models import ApprovalOutcome

from ._sqlite_tickets import SCHEMA, TicketRows

T = TypeVar("T")

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

    It keeps approval tickets too (:class:`dsh_tools.approvals.TicketStore`), in a
    ``tickets`` table, so a call asked about in one process can be answered from a second
    and resumed, exactly once, from a third.

    :param timeout_s: how long an operation waits for another connection's lock before it
        fails (closed).
    :param clock: the time (seconds since the epoch) tickets are answered, resumed and
        expire by.
    :param poll_s: how often :meth:`wait_for_answer` looks at the file.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        poll_s: float = 0.05,
    ) -> None:
        self.path = Path(path)
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self._clock = clock
        self._ready = False
        self._ready_lock = threading.Lock()
        self._tickets = TicketRows(self._transaction, clock)

    @classmethod
    def for_workspace(
        cls, root: str | os.PathLike[str], *, directory: str | os.PathLike[str] | None = None
    ) -> SqliteApprovalStore:
        """The store of the workspace at ``root``: one file per workspace, kept in
        ``directory`` (default :func:`approvals_directory`), never inside the workspace."""
        real = os.path.realpath(root)
        name = hashlib.sha256(os.fsencode(real)).hexdigest()[:32] + ".sqlite3"
        return cls(Path(directory or approvals_directory()) / name)

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

    # ------------------------------------------------------------------ tickets

    def open_ticket(self, ticket: ApprovalTicket) -> ApprovalTicket:
        return self._tickets.open_ticket(ticket)

    def get_ticket(self, ticket_id: str) -> ApprovalTicket | None:
        return self._tickets.get_ticket(ticket_id)

    def find_ticket(self, key: ApprovalKey) -> ApprovalTicket | None:
        return self._tickets.find_ticket(key)

    def list_tickets(
        self, *, agent: str | None = None, state: TicketState | None = None
    ) -> Sequence[ApprovalTicket]:
        return self._tickets.list_tickets(agent=agent, state=state)

    def answer_ticket(self, ticket_id: str, answer: TicketAnswer) -> ApprovalTicket:
        return self._tickets.answer_ticket(ticket_id, answer)

    def consume_ticket(self, ticket_id: str) -> ApprovalTicket | None:
        return self._tickets.consume_ticket(ticket_id)

    def wait_for_answer(self, ticket_id: str, timeout_s: float) -> ApprovalTicket | None:
        """Look at the ticket every ``poll_s`` seconds until it is no longer pending."""
        deadline = time.monotonic() + max(timeout_s, 0.0)
        while True:
            ticket = self.get_ticket(ticket_id)
            left = deadline - time.monotonic()
            if ticket is None or ticket.state is not TicketState.PENDING or left <= 0:
                return ticket
            time.sleep(min(self.poll_s, left))

    # ------------------------------------------------------------------ file

    def _transaction(self, run: Callable[[sqlite3.Connection], T], writes: bool) -> T:
        """``run`` in one transaction: an immediate one when it ``writes`` (it holds the
        write lock from the start, so a compare-and-set cannot interleave with another
        connection's), a deferred one when it only reads."""
        try:
            self._prepare()
            connection = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
            try:
                connection.execute("BEGIN IMMEDIATE" if writes else "BEGIN")
                try:
                    done = run(connection)
                except BaseException:
                    connection.execute("ROLLBACK")
                    raise
                connection.execute("COMMIT")
                return done
            finally:
                connection.close()
        except TicketError:
            raise
        except (sqlite3.Error, OSError, ValueError, TypeError, KeyError) as error:
            raise ApprovalStoreError(f"approval store {self.path}: {error}") from None

    def _run(self, statement: str, parameters: tuple[object, ...]) -> list[tuple[object, ...]]:
        """One statement in a transaction of its own, on a connection of its own."""
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
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
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
                    for statement in SCHEMA:
                        connection.execute(statement)
                    connection.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
            finally:
                connection.close()
            self._ready = True


def _columns(key: ApprovalKey) -> tuple[str, str, str]:
    return key.agent, key.tool_name, key.arguments_sha256 or _ANY_ARGUMENTS
