"""The call journal in the SQLite approval store's file (see
:mod:`dsh_tools.approvals._journal`).

Every method is one ``BEGIN IMMEDIATE`` transaction (the file's write lock held from its
start), so taking a ticket and starting an entry happen together or not at all, and two
processes never both start, retake or finish one entry. Leases are judged by the store's
clock, and so is the age of a finished entry that :meth:`SqliteJournal.prune_calls` drops.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from dsh_tools._json import JsonValue
from dsh_tools.approvals import JournalBegin, JournalEntry, JournalState, begin_entry
from dsh_tools.approvals._journal import retention

from .journal_columns import JOURNAL_COLUMNS, earlier_where, entry_from_row, entry_row, filters
from .sqlite_tickets import TicketRows, Transaction
from .ticket_columns import json_text

__all__ = ["JOURNAL_SCHEMA", "SqliteJournal"]

JOURNAL_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS call_journal (agent TEXT NOT NULL, key TEXT NOT NULL, "
    "tool TEXT NOT NULL, arguments_sha256 TEXT NOT NULL, call_id TEXT NOT NULL, "
    "owner TEXT NOT NULL, state TEXT NOT NULL, started_at REAL NOT NULL, "
    "lease_expires_at REAL NOT NULL, finished_at REAL, result TEXT, ticket_id TEXT, "
    "attempts INTEGER NOT NULL, PRIMARY KEY (agent, key))",
    "CREATE INDEX IF NOT EXISTS call_journal_by_call "
    "ON call_journal (agent, tool, arguments_sha256)",
)
"""The journal's table: one step of the file's schema (see :mod:`.sqlite_schema`)."""
_MINE = "agent = ? AND key = ? AND owner = ? AND state = 'started'"


class SqliteJournal:
    """The journal half of :class:`~dsh_tools_plugins.approval_store.SqliteApprovalStore`:
    the store provides its ``_transaction``, its ``_tickets`` (to take a ticket inside the
    same transaction) and its ``_clock``."""

    _transaction: Transaction[Any]
    _tickets: TicketRows
    _clock: Callable[[], float]
    journal_retention_s: float

    def begin_call(
        self,
        entry: JournalEntry,
        lease_s: float,
        ticket_id: str | None = None,
        *,
        earlier: bool = False,
    ) -> JournalBegin:
        def run(connection: sqlite3.Connection) -> JournalBegin:
            def insert(started: JournalEntry) -> None:
                connection.execute(
                    f"INSERT INTO call_journal ({JOURNAL_COLUMNS}) VALUES ({', '.join('?' * 13)})",
                    entry_row(started),
                )

            return begin_entry(
                entry,
                lease_s,
                ticket_id,
                kept=self._get(connection, entry.agent, entry.key),
                take=lambda ticket: self._tickets.consume(connection, ticket),
                now=self._clock,
                insert=insert,
                earlier=self._earlier(connection, entry) if earlier else None,
            )

        return self._transaction(run, True)  # type: ignore[no-any-return]

    def retake_call(self, agent: str, key: str, owner: str, lease_s: float) -> JournalEntry | None:
        def run(connection: sqlite3.Connection) -> JournalEntry | None:
            now = self._clock()
            changed = connection.execute(
                "UPDATE call_journal SET owner = ?, lease_expires_at = ?, attempts = attempts + 1 "
                "WHERE agent = ? AND key = ? AND state = 'started' AND lease_expires_at <= ?",
                (owner, now + lease_s, agent, key, now),
            ).rowcount
            return self._get(connection, agent, key) if changed == 1 else None

        return self._transaction(run, True)  # type: ignore[no-any-return]

    def renew_call(self, agent: str, key: str, owner: str, lease_s: float) -> bool:
        return self._changed(
            f"UPDATE call_journal SET lease_expires_at = ? WHERE {_MINE}",
            lambda: (self._clock() + lease_s, agent, key, owner),
        )

    def finish_call(self, agent: str, key: str, owner: str, result: JsonValue) -> bool:
        return self._changed(
            "UPDATE call_journal SET state = 'finished', finished_at = ?, result = ? "
            f"WHERE {_MINE}",
            lambda: (self._clock(), json_text(result), agent, key, owner),
        )

    def get_call(self, agent: str, key: str) -> JournalEntry | None:
        return self._transaction(lambda connection: self._get(connection, agent, key), False)  # type: ignore[no-any-return]

    def prune_calls(self, older_than_s: float | None = None) -> int:
        kept_s = self.journal_retention_s if older_than_s is None else older_than_s
        kept_s = retention(kept_s, "older_than_s")

        def run(connection: sqlite3.Connection) -> int:
            return connection.execute(
                "DELETE FROM call_journal WHERE state = 'finished' AND finished_at <= ?",
                (self._clock() - kept_s,),
            ).rowcount

        return self._transaction(run, True)  # type: ignore[no-any-return]

    def list_calls(
        self,
        *,
        agent: str | None = None,
        state: JournalState | None = None,
        tool: str | None = None,
        arguments_sha256: str | None = None,
    ) -> Sequence[JournalEntry]:
        where, parameters = filters(agent, tool, arguments_sha256, "?")

        def run(connection: sqlite3.Connection) -> list[JournalEntry]:
            rows = connection.execute(
                f"SELECT {JOURNAL_COLUMNS} FROM call_journal {where} ORDER BY started_at, rowid",
                parameters,
            ).fetchall()
            now = self._clock()
            entries = [entry_from_row(row, now) for row in rows]
            return [entry for entry in entries if state is None or entry.state is state]

        return self._transaction(run, False)  # type: ignore[no-any-return]

    def _changed(self, statement: str, parameters: Callable[[], tuple[object, ...]]) -> bool:
        def run(connection: sqlite3.Connection) -> bool:
            return bool(connection.execute(statement, parameters()).rowcount == 1)

        return self._transaction(run, True)  # type: ignore[no-any-return]

    def _earlier(self, connection: sqlite3.Connection, entry: JournalEntry) -> JournalEntry | None:
        where, parameters = earlier_where(entry, "?")
        row = connection.execute(
            f"SELECT {JOURNAL_COLUMNS} FROM call_journal {where} "
            "ORDER BY started_at, rowid LIMIT 1",
            parameters,
        ).fetchone()
        return None if row is None else entry_from_row(row, self._clock())

    def _get(self, connection: sqlite3.Connection, agent: str, key: str) -> JournalEntry | None:
        row = connection.execute(
            f"SELECT {JOURNAL_COLUMNS} FROM call_journal WHERE agent = ? AND key = ?",
            (agent, key),
        ).fetchone()
        return None if row is None else entry_from_row(row, self._clock())
