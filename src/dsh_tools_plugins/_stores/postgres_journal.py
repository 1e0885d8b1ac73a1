"""The call journal in the PostgreSQL approval store's database (see
:mod:`dsh_tools.approvals._journal`).

Every method is one transaction. Starting an entry takes a transaction-level advisory
lock on its key first, so two processes (or machines) never both start one key; taking
the ticket happens in the same transaction. Retaking, renewing and finishing are each one
``UPDATE`` compare-and-set on the row. Leases are judged by the server's clock, and so is
the age of a finished entry that :meth:`PostgresJournal.prune_calls` drops.

:data:`JOURNAL_SCHEMA` is the table's DDL, the component ``journal`` of
:data:`~dsh_tools_plugins._stores.postgres_schema.COMPONENTS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dsh_tools._json import JsonValue
from dsh_tools.approvals import JournalBegin, JournalEntry, JournalState, begin_entry
from dsh_tools.approvals._journal import retention

from .journal_columns import JOURNAL_COLUMNS, earlier_where, entry_from_row, entry_row, filters
from .postgres_tickets import NOW, consume
from .ticket_columns import json_text

if TYPE_CHECKING:
    import psycopg

    from .postgres import Connections

    Connection = psycopg.Connection[tuple[Any, ...]]

__all__ = ["JOURNAL_SCHEMA", "JOURNAL_SCHEMA_VERSION", "PostgresJournal"]

JOURNAL_SCHEMA = (
    "CREATE TABLE dsh_tools_call_journal (seq bigserial NOT NULL, agent text NOT NULL, "
    "key text NOT NULL, tool text NOT NULL, arguments_sha256 text NOT NULL, "
    "call_id text NOT NULL, owner text NOT NULL, state text NOT NULL, "
    "started_at double precision NOT NULL, lease_expires_at double precision NOT NULL, "
    "finished_at double precision, result text, ticket_id text, attempts integer NOT NULL, "
    "PRIMARY KEY (agent, key))",
    "CREATE INDEX dsh_tools_call_journal_by_call "
    "ON dsh_tools_call_journal (agent, tool, arguments_sha256)",
)
"""The journal's table (the rights a store's role needs on it: ``SELECT``, ``INSERT``,
``UPDATE``, ``DELETE`` to prune it, and ``USAGE`` on its sequence)."""
JOURNAL_SCHEMA_VERSION = 1
_TABLE = "dsh_tools_call_journal"
_SELECT = f"SELECT {JOURNAL_COLUMNS}, {NOW} FROM {_TABLE}"
_MINE = "agent = %s AND key = %s AND owner = %s AND state = 'started'"


class PostgresJournal:
    """The :class:`~dsh_tools.approvals.JournalStore` methods of a store whose
    ``_connections`` reach the database."""

    _connections: Connections
    journal_retention_s: float

    def begin_call(
        self,
        entry: JournalEntry,
        lease_s: float,
        ticket_id: str | None = None,
        *,
        earlier: bool = False,
    ) -> JournalBegin:
        def run(connection: Connection) -> JournalBegin:
            connection.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (json_text(["dsh_tools journal", entry.agent, entry.key]),),
            )

            def insert(started: JournalEntry) -> None:
                connection.execute(
                    f"INSERT INTO {_TABLE} ({JOURNAL_COLUMNS}) VALUES ({', '.join(['%s'] * 13)})",
                    entry_row(started),
                )

            return begin_entry(
                entry,
                lease_s,
                ticket_id,
                kept=_get(connection, entry.agent, entry.key),
                take=lambda ticket: consume(connection, ticket),
                now=lambda: float(_one(connection, f"SELECT {NOW}")[0]),
                insert=insert,
                earlier=_earlier(connection, entry) if earlier else None,
            )

        return self._connections.run(run)

    def retake_call(self, agent: str, key: str, owner: str, lease_s: float) -> JournalEntry | None:
        def run(connection: Connection) -> JournalEntry | None:
            row = connection.execute(
                f"UPDATE {_TABLE} SET owner = %s, lease_expires_at = {NOW} + %s, "
                "attempts = attempts + 1 WHERE agent = %s AND key = %s AND state = 'started' "
                f"AND lease_expires_at <= {NOW} RETURNING {JOURNAL_COLUMNS}, {NOW}",
                (owner, lease_s, agent, key),
            ).fetchone()
            return None if row is None else entry_from_row(row, row[-1])

        return self._connections.run(run)

    def renew_call(self, agent: str, key: str, owner: str, lease_s: float) -> bool:
        return self._changed(
            f"UPDATE {_TABLE} SET lease_expires_at = {NOW} + %s WHERE {_MINE}",
            (lease_s, agent, key, owner),
        )

    def finish_call(self, agent: str, key: str, owner: str, result: JsonValue) -> bool:
        return self._changed(
            f"UPDATE {_TABLE} SET state = 'finished', finished_at = {NOW}, result = %s "
            f"WHERE {_MINE}",
            (json_text(result), agent, key, owner),
        )

    def get_call(self, agent: str, key: str) -> JournalEntry | None:
        return self._connections.run(lambda connection: _get(connection, agent, key))

    def prune_calls(self, older_than_s: float | None = None) -> int:
        kept_s = self.journal_retention_s if older_than_s is None else older_than_s
        kept_s = retention(kept_s, "older_than_s")

        def run(connection: Connection) -> int:
            return connection.execute(
                f"DELETE FROM {_TABLE} WHERE state = 'finished' AND finished_at <= {NOW} - %s",
                (kept_s,),
            ).rowcount

        return self._connections.run(run)

    def list_calls(
        self,
        *,
        agent: str | None = None,
        state: JournalState | None = None,
        tool: str | None = None,
        arguments_sha256: str | None = None,
    ) -> Sequence[JournalEntry]:
        where, parameters = filters(agent, tool, arguments_sha256, "%s")

        def run(connection: Connection) -> list[JournalEntry]:
            rows = connection.execute(
                f"{_SELECT} {where} ORDER BY started_at, seq", parameters
            ).fetchall()
            entries = [entry_from_row(row, row[-1]) for row in rows]
            return [entry for entry in entries if state is None or entry.state is state]

        return self._connections.run(run)

    def _changed(self, statement: str, parameters: tuple[object, ...]) -> bool:
        def run(connection: Connection) -> bool:
            return bool(connection.execute(statement, parameters).rowcount == 1)

        return self._connections.run(run)


def _earlier(connection: Connection, entry: JournalEntry) -> JournalEntry | None:
    where, parameters = earlier_where(entry, "%s")
    row = connection.execute(
        f"{_SELECT} {where} ORDER BY started_at, seq LIMIT 1", parameters
    ).fetchone()
    return None if row is None else entry_from_row(row, row[-1])


def _get(connection: Connection, agent: str, key: str) -> JournalEntry | None:
    row = connection.execute(f"{_SELECT} WHERE agent = %s AND key = %s", (agent, key)).fetchone()
    return None if row is None else entry_from_row(row, row[-1])


def _one(connection: Connection, statement: str) -> tuple[Any, ...]:
    row = connection.execute(statement).fetchone()
    assert row is not None
    return row
