"""Shared limits in the SQLite approval store's file (:class:`.limit_rows.LimitRows`).

Every method is one ``BEGIN IMMEDIATE`` transaction, which holds the file's write lock
from its start: the processes sharing the file take turns, so counting a pool's permits
and adding one can never interleave with another process doing the same. Expiry is
judged by the store's clock (seconds since the epoch; one machine shares it). Rows that
expired are deleted by the next transaction that looks at their pool or budget.
"""

from __future__ import annotations

import math
import os
import sqlite3
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from .limit_rows import Spend, Taken

T = TypeVar("T")

__all__ = ["LIMITS_SCHEMA", "SqliteLimitRows"]

LIMITS_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS permits (pool TEXT NOT NULL, holder TEXT PRIMARY KEY, "
    "owner TEXT NOT NULL, expires_at REAL NOT NULL)",
    "CREATE INDEX IF NOT EXISTS permits_by_pool ON permits (pool, expires_at)",
    "CREATE TABLE IF NOT EXISTS permit_waiters (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
    "pool TEXT NOT NULL, holder TEXT NOT NULL UNIQUE, owner TEXT NOT NULL, "
    "expires_at REAL NOT NULL)",
    "CREATE INDEX IF NOT EXISTS permit_waiters_by_pool ON permit_waiters (pool, seq)",
    "CREATE TABLE IF NOT EXISTS budget_spending (rule TEXT NOT NULL, account TEXT NOT NULL, "
    "spent_at REAL NOT NULL)",
    "CREATE INDEX IF NOT EXISTS budget_spending_by_account "
    "ON budget_spending (rule, account, spent_at)",
    "CREATE INDEX IF NOT EXISTS budget_spending_by_time ON budget_spending (rule, spent_at)",
)
"""The shared limits' tables: one step of the file's schema (see :mod:`.sqlite_schema`)."""


class Transaction(Protocol):
    """Runs a function in one transaction of its own (``BEGIN IMMEDIATE`` when it
    ``writes``), on its thread's connection to the file."""

    def __call__(self, run: Callable[[sqlite3.Connection], T], writes: bool, /) -> T: ...


def owner() -> str:
    """Who holds a row, for a person reading the table: this host and process."""
    return f"{os.uname().nodename}:{os.getpid()}"


class SqliteLimitRows:
    """Permits, waiters and spending through ``transaction`` (see
    :data:`.sqlite_tickets.Transaction`), timed by ``clock``."""

    def __init__(self, transaction: Transaction, clock: Callable[[], float]) -> None:
        self._transaction = transaction
        self._clock = clock

    def take(
        self, pool: str, capacity: int, holder: str, lease_s: float, seq: int | None, queue: bool
    ) -> Taken:
        def run(connection: sqlite3.Connection) -> Taken:
            now = self._clock()
            connection.execute(
                "DELETE FROM permits WHERE pool = ? AND expires_at <= ?", (pool, now)
            )
            connection.execute(
                "DELETE FROM permit_waiters WHERE pool = ? AND expires_at <= ?", (pool, now)
            )
            (held,) = connection.execute(
                "SELECT count(*) FROM permits WHERE pool = ?", (pool,)
            ).fetchone()
            (ahead,) = connection.execute(
                "SELECT count(*) FROM permit_waiters WHERE pool = ? AND seq < ?",
                (pool, _LAST if seq is None else seq),
            ).fetchone()
            if held + ahead < capacity:
                connection.execute(
                    "INSERT INTO permits VALUES (?, ?, ?, ?)",
                    (pool, holder, owner(), now + lease_s),
                )
                if seq is not None:  # it leaves the line
                    connection.execute("DELETE FROM permit_waiters WHERE seq = ?", (seq,))
                return Taken(True)
            if seq is None and queue:
                cursor = connection.execute(
                    "INSERT INTO permit_waiters (pool, holder, owner, expires_at) "
                    "VALUES (?, ?, ?, ?)",
                    (pool, holder, owner(), now + lease_s),
                )
                return Taken(False, cursor.lastrowid)
            return Taken(False, seq)

        return self._transaction(run, True)

    def release(self, holder: str) -> None:
        self._one("DELETE FROM permits WHERE holder = ?", (holder,))

    def leave(self, holder: str) -> None:
        self._one("DELETE FROM permit_waiters WHERE holder = ?", (holder,))

    def renew(self, holders: Sequence[str], lease_s: float) -> None:
        def run(connection: sqlite3.Connection) -> None:
            expires = [(self._clock() + lease_s, holder) for holder in holders]
            connection.executemany("UPDATE permits SET expires_at = ? WHERE holder = ?", expires)
            connection.executemany(
                "UPDATE permit_waiters SET expires_at = ? WHERE holder = ?", expires
            )

        self._transaction(run, True)

    def spend(self, checks: Sequence[Spend], dry: bool) -> int | None:
        def run(connection: sqlite3.Connection) -> int | None:
            now = self._clock()
            for index, check in enumerate(checks):
                if check.window_s is not None:  # what left the window no longer matters
                    connection.execute(
                        "DELETE FROM budget_spending WHERE rule = ? AND spent_at <= ?",
                        (check.rule, now - check.window_s),
                    )
                (spent,) = connection.execute(
                    "SELECT count(*) FROM budget_spending WHERE rule = ? AND account = ?",
                    (check.rule, check.account),
                ).fetchone()
                if spent >= check.limit:
                    return index
            if not dry:
                connection.executemany(
                    "INSERT INTO budget_spending VALUES (?, ?, ?)",
                    [(check.rule, check.account, now) for check in checks],
                )
            return None

        return self._transaction(run, True)

    def spent(self, check: Spend) -> int:
        def run(connection: sqlite3.Connection) -> int:
            since = -math.inf if check.window_s is None else self._clock() - check.window_s
            (spent,) = connection.execute(
                "SELECT count(*) FROM budget_spending WHERE rule = ? AND account = ? "
                "AND spent_at > ?",
                (check.rule, check.account, since),
            ).fetchone()
            return int(spent)

        return self._transaction(run, False)

    def _one(self, statement: str, parameters: tuple[object, ...]) -> None:
        self._transaction(lambda connection: connection.execute(statement, parameters), True)


_LAST = 2**62
"""Later than any place in line."""
