"""Shared limits in the PostgreSQL approval store's database (:class:`.limit_rows.LimitRows`).

Every method is one transaction. One that counts and adds first takes a transaction-level
advisory lock on what it counts (a pool, or a budget's account), so two processes (or
machines) never both see the last free permit, or the last call of a budget. Expiry is
judged by the server's clock (``now()``). Giving a permit back, or leaving the line,
notifies :data:`CHANNEL`, which wakes the other processes' waiters at once.

:data:`LIMITS_SCHEMA` is the tables' DDL, the component ``limits`` of
:data:`~dsh_tools_plugins._stores.postgres_schema.COMPONENTS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .limit_rows import Spend, Taken
from .sqlite_limits import owner

if TYPE_CHECKING:
    import psycopg

    from .postgres import Connections

    Connection = psycopg.Connection[tuple[Any, ...]]

__all__ = [
    "CHANNEL",
    "LIMITS_SCHEMA",
    "LIMITS_SCHEMA_VERSION",
    "PostgresLimitRows",
]

CHANNEL = "dsh_tools_permits"
"""Announces that a pool may have a permit free (the payload is :data:`RELEASED`)."""
RELEASED = "released"

LIMITS_SCHEMA = (
    "CREATE TABLE dsh_tools_permits (pool text NOT NULL, holder text PRIMARY KEY, "
    "owner text NOT NULL, expires_at timestamptz NOT NULL)",
    "CREATE INDEX dsh_tools_permits_by_pool ON dsh_tools_permits (pool, expires_at)",
    "CREATE TABLE dsh_tools_permit_waiters (seq bigserial PRIMARY KEY, pool text NOT NULL, "
    "holder text NOT NULL UNIQUE, owner text NOT NULL, expires_at timestamptz NOT NULL)",
    "CREATE INDEX dsh_tools_permit_waiters_by_pool ON dsh_tools_permit_waiters (pool, seq)",
    "CREATE TABLE dsh_tools_budget_spending (rule text NOT NULL, account text NOT NULL, "
    "spent_at timestamptz NOT NULL DEFAULT now())",
    "CREATE INDEX dsh_tools_budget_spending_by_account "
    "ON dsh_tools_budget_spending (rule, account, spent_at)",
    "CREATE INDEX dsh_tools_budget_spending_by_time ON dsh_tools_budget_spending (rule, spent_at)",
)
"""The shared limits' tables (the rights a store's role needs on them: ``SELECT``,
``INSERT``, ``UPDATE``, ``DELETE``, and ``USAGE`` on the waiters' sequence)."""
LIMITS_SCHEMA_VERSION = 1
_LEASE = "now() + make_interval(secs => %s)"


class PostgresLimitRows:
    """Permits, waiters and spending on ``connections``."""

    def __init__(self, connections: Connections) -> None:
        self._connections = connections

    def take(
        self, pool: str, capacity: int, holder: str, lease_s: float, seq: int | None, queue: bool
    ) -> Taken:
        def work(connection: Connection) -> Taken:
            _lock(connection, "permits", pool)
            for table in ("dsh_tools_permits", "dsh_tools_permit_waiters"):
                connection.execute(
                    f"DELETE FROM {table} WHERE pool = %s AND expires_at <= now()", (pool,)
                )
            (held,) = _one(
                connection, "SELECT count(*) FROM dsh_tools_permits WHERE pool = %s", pool
            )
            (ahead,) = _one(
                connection,
                "SELECT count(*) FROM dsh_tools_permit_waiters WHERE pool = %s "
                "AND (%s::bigint IS NULL OR seq < %s)",
                pool,
                seq,
                seq,
            )
            if held + ahead < capacity:
                connection.execute(
                    f"INSERT INTO dsh_tools_permits VALUES (%s, %s, %s, {_LEASE})",
                    (pool, holder, owner(), lease_s),
                )
                if seq is not None:  # it leaves the line
                    connection.execute(
                        "DELETE FROM dsh_tools_permit_waiters WHERE seq = %s", (seq,)
                    )
                return Taken(True)
            if seq is None and queue:
                (queued,) = _one(
                    connection,
                    "INSERT INTO dsh_tools_permit_waiters (pool, holder, owner, expires_at) "
                    f"VALUES (%s, %s, %s, {_LEASE}) RETURNING seq",
                    pool,
                    holder,
                    owner(),
                    lease_s,
                )
                return Taken(False, int(queued))
            return Taken(False, seq)

        return self._connections.run(work)

    def release(self, holder: str) -> None:
        self._announcing("DELETE FROM dsh_tools_permits WHERE holder = %s", holder)

    def leave(self, holder: str) -> None:
        self._announcing("DELETE FROM dsh_tools_permit_waiters WHERE holder = %s", holder)

    def renew(self, holders: Sequence[str], lease_s: float) -> None:
        def work(connection: Connection) -> None:
            for table in ("dsh_tools_permits", "dsh_tools_permit_waiters"):
                connection.execute(
                    f"UPDATE {table} SET expires_at = {_LEASE} WHERE holder = ANY(%s)",
                    (lease_s, list(holders)),
                )

        self._connections.run(work)

    def spend(self, checks: Sequence[Spend], dry: bool) -> int | None:
        def work(connection: Connection) -> int | None:
            for rule, account in sorted({(check.rule, check.account) for check in checks}):
                _lock(connection, "budget", f"{rule}\n{account}")
            for index, check in enumerate(checks):
                if check.window_s is not None:  # what left the window no longer matters
                    connection.execute(
                        "DELETE FROM dsh_tools_budget_spending WHERE rule = %s AND "
                        "spent_at <= now() - make_interval(secs => %s)",
                        (check.rule, check.window_s),
                    )
                (spent,) = _one(
                    connection,
                    "SELECT count(*) FROM dsh_tools_budget_spending "
                    "WHERE rule = %s AND account = %s",
                    check.rule,
                    check.account,
                )
                if spent >= check.limit:
                    return index
            if not dry:
                with connection.cursor() as cursor:
                    cursor.executemany(
                        "INSERT INTO dsh_tools_budget_spending (rule, account) VALUES (%s, %s)",
                        [(check.rule, check.account) for check in checks],
                    )
            return None

        return self._connections.run(work)

    def spent(self, check: Spend) -> int:
        def work(connection: Connection) -> int:
            (spent,) = _one(
                connection,
                "SELECT count(*) FROM dsh_tools_budget_spending WHERE rule = %s AND "
                "account = %s AND (%s::float8 IS NULL OR "
                "spent_at > now() - make_interval(secs => %s))",
                check.rule,
                check.account,
                check.window_s,
                check.window_s,
            )
            return int(spent)

        return self._connections.run(work)

    def _announcing(self, statement: str, holder: str) -> None:
        def work(connection: Connection) -> None:
            if connection.execute(statement, (holder,)).rowcount:
                connection.execute("SELECT pg_notify(%s, %s)", (CHANNEL, RELEASED))

        self._connections.run(work)


def _lock(connection: Connection, kind: str, key: str) -> None:
    """Hold, until the transaction ends, the advisory lock of ``kind`` ``key``."""
    connection.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"dsh_tools {kind} {key}",)
    )


def _one(connection: Connection, statement: str, *parameters: object) -> tuple[Any, ...]:
    row = connection.execute(statement, parameters).fetchone()
    assert row is not None
    return row
