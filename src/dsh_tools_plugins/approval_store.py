"""A durable approval store: remembered approvals in one SQLite file per workspace.

:class:`SqliteApprovalStore` implements :class:`dsh_tools.approvals.ApprovalStore` with
the standard library's ``sqlite3``. Pass it where the approval service is configured::

    store = SqliteApprovalStore.for_workspace(root)
    registry = ToolRegistry(approval=service, approval_store=store)

Each operation is a transaction of its own, on a connection its thread keeps open
between operations (:mod:`._stores.sqlite_connections`: a new one after a fork, or when
the file at the path changed), so one store may be used from several threads, and
several registries and processes may share one file: SQLite's file locks order their
writes, and a write is committed before :meth:`~SqliteApprovalStore.
remember` returns. A file that is locked for longer than ``timeout_s``, corrupt, or not an
approval store makes the operation raise :class:`ApprovalStoreError`; the pipeline then
fails closed (a failed recall asks the approval service again, a failed write fails the
call with ``POLICY_ERROR``).

:meth:`SqliteApprovalStore.for_workspace` keeps the file *outside* the workspace, in the
user's state directory (``$XDG_STATE_HOME/dsh-tools/approvals``, else
``~/.local/state/dsh-tools/approvals``), named by a hash of the workspace's real path: a
file inside the workspace could be written by the very agent whose calls it approves.
Before each connection the file is checked as a host file
(:func:`dsh_tools._hostfiles.check_host_file`): no symbolic link on its path, a regular
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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from dsh_tools._hostfiles import HostFileError, check_host_file, writable_trees
from dsh_tools._models import ApprovalOutcome
from dsh_tools.approvals import (
    REMEMBERED_OUTCOMES,
    ApprovalKey,
    ApprovalTicket,
    TicketAnswer,
    TicketError,
    TicketState,
    TicketWatchers,
    exact_outcome,
    wait_watched,
)
from dsh_tools.approvals._answers import GrantKeeping
from dsh_tools.approvals._journal import JOURNAL_RETENTION_S, retention

from ._stores.error import ApprovalStoreError
from ._stores.sqlite_connections import ThreadConnections
from ._stores.sqlite_journal import SqliteJournal
from ._stores.sqlite_schema import SchemaError, upgrade
from ._stores.sqlite_tickets import TicketRows

T = TypeVar("T")

if TYPE_CHECKING:
    from .approval_postgres import PostgresApprovalStore

__all__ = [
    "APPROVALS_URL_ENV",
    "ApprovalStoreError",
    "SqliteApprovalStore",
    "approvals_directory",
    "open_approval_store",
]

APPROVALS_URL_ENV = "DSH_TOOLS_APPROVALS_URL"
"""The environment variable ``dsh-tools`` reads the approval store's location from when
``--approvals-store`` is not given."""

_ANY_ARGUMENTS = "*"
"""The ``arguments_sha256`` column of an answer widened to the tool (a primary key column
cannot be NULL and stay unique)."""
_KEY = "agent = ? AND tool = ? AND arguments_sha256 = ?"
_LIVE = "(expires_at IS NULL OR expires_at > ?) AND (uses_left IS NULL OR uses_left > 0)"
"""A grant that has not ended (its parameter: the time now)."""


def approvals_directory() -> Path:
    """Where :meth:`SqliteApprovalStore.for_workspace` keeps its files."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
    return Path(state) / "dsh-tools" / "approvals"


class SqliteApprovalStore(SqliteJournal, GrantKeeping):
    """Remembered approvals in the SQLite file ``path`` (created on first use).

    It keeps approval tickets too (:class:`dsh_tools.approvals.TicketStore`), in a
    ``tickets`` table, so a call asked about in one process can be answered from a second
    and resumed, exactly once, from a third; and the call journal
    (:class:`dsh_tools.approvals.JournalStore`) in a ``call_journal`` table.

    :param timeout_s: how long an operation waits for another connection's lock before it
        fails (closed).
    :param clock: the time (seconds since the epoch) tickets are answered, resumed and
        expire by, and grants that end expire by.
    :param poll_s: how often, while calls of this process wait for answers, one thread
        looks at their tickets in the file (answers made by this store object wake them
        at once).
    :param journal_retention_s: how long a finished journal entry is kept (see
        :meth:`~dsh_tools.approvals.JournalStore.prune_calls`): a week by default.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        poll_s: float = 0.05,
        journal_retention_s: float = JOURNAL_RETENTION_S,
    ) -> None:
        self.journal_retention_s = retention(journal_retention_s, "journal_retention_s")
        self.path = Path(path)
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self._clock = clock
        self._trees = writable_trees()
        self._ready = False
        self._ready_lock = threading.Lock()
        self._connections = ThreadConnections(self.path, timeout_s)
        self._tickets = TicketRows(self._transaction, clock)
        self._watchers = TicketWatchers(self._tickets.settled, poll_s)

    def __repr__(self) -> str:
        return f"SqliteApprovalStore({str(self.path)!r})"

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

    def check(self) -> None:
        """Create or upgrade the file now: raise :class:`ApprovalStoreError` when the
        store cannot be used."""
        self._run("SELECT 1", ())

    def recall(self, key: ApprovalKey) -> ApprovalOutcome | None:
        rows = self._run(
            f"SELECT outcome FROM approvals WHERE {_KEY} AND {_LIVE}",
            (*_columns(key), self._clock()),
        )
        if not rows:
            return None
        outcome = exact_outcome(rows[0][0])
        if outcome not in REMEMBERED_OUTCOMES:
            raise ApprovalStoreError(f"{self.path} holds an unknown outcome {rows[0][0]!r}")
        return outcome

    def _keep(
        self, key: ApprovalKey, outcome: ApprovalOutcome, lifetime: float | None, uses: int | None
    ) -> None:
        now = self._clock()
        expires_at = None if lifetime is None else now + lifetime
        self._run(
            "INSERT OR REPLACE INTO approvals (agent, tool, arguments_sha256, outcome, "
            "remembered_at, expires_at, uses_left) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (*_columns(key), outcome.value, now, expires_at, uses),
        )

    def use(self, key: ApprovalKey) -> ApprovalOutcome | None:
        """Take one use of the allowance under ``key`` (see
        :meth:`dsh_tools.approvals.LimitedGrantStore.use`): one ``UPDATE`` that only
        matches a grant with a use left, so two processes never take the last one both."""
        taken = self._count(
            f"UPDATE approvals SET uses_left = uses_left - 1 WHERE {_KEY} AND {_LIVE} "
            "AND outcome = ?",
            (*_columns(key), self._clock(), ApprovalOutcome.ALLOWED_ALWAYS.value),
        )
        return ApprovalOutcome.ALLOWED_ALWAYS if taken else None

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
        answered = self._tickets.answer_ticket(ticket_id, answer)
        self._watchers.announce((ticket_id,))
        return answered

    def consume_ticket(self, ticket_id: str) -> ApprovalTicket | None:
        return self._tickets.consume_ticket(ticket_id)

    def wait_for_answer(self, ticket_id: str, timeout_s: float) -> ApprovalTicket | None:
        return wait_watched(self.watch_ticket, self.get_ticket, ticket_id, timeout_s)

    def watch_ticket(self, ticket_id: str, changed: Callable[[], None]) -> Callable[[], None]:
        """One thread per store looks at the waited tickets every ``poll_s`` seconds."""
        return self._watchers.watch(ticket_id, changed)

    # ------------------------------------------------------------------ file

    def _check_file(self) -> None:
        """Refuse the file, before every operation, when it lies where a tool writes or is
        reached through a link (see :mod:`dsh_tools._hostfiles`)."""
        try:
            check_host_file(self.path, what="approval store", trees=self._trees, make_parents=0o700)
        except HostFileError as error:
            raise ApprovalStoreError(str(error)) from None

    def _transaction(self, run: Callable[[sqlite3.Connection], T], writes: bool) -> T:
        """``run`` in one transaction: an immediate one when it ``writes`` (it holds the
        write lock from the start, so a compare-and-set cannot interleave with another
        connection's), a deferred one when it only reads."""
        self._check_file()
        try:
            self._prepare()
            with self._connections.connection() as connection:
                connection.execute("BEGIN IMMEDIATE" if writes else "BEGIN")
                try:
                    done = run(connection)
                except BaseException:
                    connection.execute("ROLLBACK")
                    raise
                connection.execute("COMMIT")
                return done
        except TicketError:
            raise
        except (sqlite3.Error, OSError, ValueError, TypeError, KeyError) as error:
            raise ApprovalStoreError(f"approval store {self.path}: {error}") from None

    def _run(self, statement: str, parameters: tuple[object, ...]) -> list[tuple[object, ...]]:
        """The rows of one statement in a transaction of its own."""
        return self._execute(statement, parameters, sqlite3.Cursor.fetchall)

    def _count(self, statement: str, parameters: tuple[object, ...]) -> int:
        """How many rows one statement in a transaction of its own changed."""
        return self._execute(statement, parameters, lambda cursor: cursor.rowcount)

    def _execute(
        self,
        statement: str,
        parameters: tuple[object, ...],
        collect: Callable[[sqlite3.Cursor], T],
    ) -> T:
        """One statement, a transaction of its own."""
        self._check_file()
        try:
            self._prepare()
            with self._connections.connection() as connection:  # autocommit: one statement
                return collect(connection.execute(statement, parameters))
        except (sqlite3.Error, OSError, ValueError) as error:  # ValueError: unencodable text
            raise ApprovalStoreError(f"approval store {self.path}: {error}") from None
        except SchemaError as error:
            raise ApprovalStoreError(f"approval store {self.path}: {error}") from None

    def _prepare(self) -> None:
        """Create the file and its table once per store, or upgrade a file an older
        version made; refuse a file of another kind."""
        if self._ready:
            return
        with self._ready_lock:
            if self._ready:
                return
            connection = sqlite3.connect(self.path, timeout=self.timeout_s)
            try:
                upgrade(connection)
            finally:
                connection.close()
            self._ready = True


def _columns(key: ApprovalKey) -> tuple[str, str, str]:
    return key.agent, key.tool_name, key.arguments_sha256 or _ANY_ARGUMENTS


def open_approval_store(
    location: str,
    *,
    workspace: str | os.PathLike[str] | None = None,
    timeout_s: float = 5.0,
    journal_retention_s: float = JOURNAL_RETENTION_S,
) -> SqliteApprovalStore | PostgresApprovalStore:
    """The store at ``location``, checked (reachable, of a schema this version knows): a
    ``postgresql://`` URL (extra: ``postgres``) or a SQLite file, which must lie outside
    ``workspace`` (where tools write, an agent could approve itself). ``timeout_s`` and
    ``journal_retention_s`` are the store's. Raises :class:`ApprovalStoreError`
    otherwise; never falls back to another store."""
    from .approval_postgres import PostgresApprovalStore, is_postgres_url

    store: SqliteApprovalStore | PostgresApprovalStore
    if is_postgres_url(location):
        store = PostgresApprovalStore(
            location, timeout_s=timeout_s, journal_retention_s=journal_retention_s
        )
    elif "://" in location or not location.strip():
        scheme = location.split("://")[0] if location.strip() else ""
        raise ApprovalStoreError(
            f"approval store {scheme + '://...' if scheme else repr(location)}: expected a "
            "postgresql:// URL or the path of a SQLite file"
        )
    else:
        path = Path(location).expanduser()
        if workspace is not None and _inside(path, Path(workspace)):
            raise ApprovalStoreError(
                f"approval store {path} lies inside the workspace {workspace}, where tools "
                "write: keep it outside"
            )
        store = SqliteApprovalStore(
            path, timeout_s=timeout_s, journal_retention_s=journal_retention_s
        )
    store.check()
    return store


def _inside(path: Path, directory: Path) -> bool:
    real, root = Path(os.path.realpath(path)), Path(os.path.realpath(directory))
    return real == root or root in real.parents
