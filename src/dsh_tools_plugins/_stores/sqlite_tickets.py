"""The tickets half of :class:`~dsh_tools_plugins.approval_store.SqliteApprovalStore`.

One row per ticket in the ``tickets`` table of the store's file. Every change is one
statement in a ``BEGIN IMMEDIATE`` transaction, so an answer and a resume are each a
compare-and-set on the row's ``state`` that exactly one connection wins, whichever
process it belongs to. Expiry is judged by the store's clock when a row is read or
changed; nothing is deleted.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from dsh_tools.approvals import (
    ApprovalKey,
    ApprovalTicket,
    TicketAnswer,
    TicketState,
    stamped,
)
from dsh_tools.approvals._tickets import unanswerable

from .ticket_columns import answer_json, ticket_from_row, ticket_row

T = TypeVar("T")
Transaction = Callable[[Callable[[sqlite3.Connection], T], bool], T]
"""Runs a function in one transaction of its own: ``BEGIN IMMEDIATE`` when the flag says
it writes, a deferred ``BEGIN`` (readers never wait for the write lock) when not."""

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS tickets (id TEXT PRIMARY KEY, agent TEXT NOT NULL, "
    "tool TEXT NOT NULL, call_id TEXT NOT NULL, arguments TEXT NOT NULL, "
    "arguments_sha256 TEXT NOT NULL, reason TEXT, card TEXT, asked_by TEXT, "
    "created_at REAL NOT NULL, expires_at REAL NOT NULL, state TEXT NOT NULL, "
    "answer TEXT, answered_at REAL, resumed_at REAL)",
    "CREATE INDEX IF NOT EXISTS tickets_by_call ON tickets (agent, tool, arguments_sha256)",
)
_COLUMNS = (
    "id, agent, tool, call_id, arguments, arguments_sha256, reason, card, asked_by, "
    "created_at, expires_at, state, answer, answered_at, resumed_at"
)
_OPEN = "state IN ('pending', 'answered') AND expires_at > ?"
_CHUNK = 500
"""The most ticket ids one statement asks about (SQLite's bound on parameters)."""


class TicketRows:
    """Tickets read and changed through ``transaction`` (one immediate transaction per
    call), by the time ``clock`` gives."""

    def __init__(self, transaction: Transaction[Any], clock: Callable[[], float]) -> None:
        self._transaction = transaction
        self._clock = clock

    def open_ticket(self, ticket: ApprovalTicket) -> ApprovalTicket:
        def run(connection: sqlite3.Connection) -> ApprovalTicket:
            found = self._open(connection, ticket.key)
            if found is not None:
                return found
            kept = stamped(ticket, self._clock())
            connection.execute(
                f"INSERT INTO tickets ({_COLUMNS}) VALUES ({', '.join('?' * 15)})", ticket_row(kept)
            )
            return kept

        return self._transaction(run, True)  # type: ignore[no-any-return]

    def get_ticket(self, ticket_id: str) -> ApprovalTicket | None:
        return self._transaction(lambda connection: self._get(connection, ticket_id), False)  # type: ignore[no-any-return]

    def find_ticket(self, key: ApprovalKey) -> ApprovalTicket | None:
        return self._transaction(lambda connection: self._open(connection, key), False)  # type: ignore[no-any-return]

    def list_tickets(
        self, *, agent: str | None = None, state: TicketState | None = None
    ) -> Sequence[ApprovalTicket]:
        def run(connection: sqlite3.Connection) -> list[ApprovalTicket]:
            rows = connection.execute(
                f"SELECT {_COLUMNS} FROM tickets WHERE ? IS NULL OR agent = ? "
                "ORDER BY created_at, rowid",
                (agent, agent),
            ).fetchall()
            tickets = [ticket_from_row(row, self._clock()) for row in rows]
            return [ticket for ticket in tickets if state is None or ticket.state is state]

        return self._transaction(run, False)  # type: ignore[no-any-return]

    def answer_ticket(self, ticket_id: str, answer: TicketAnswer) -> ApprovalTicket:
        def run(connection: sqlite3.Connection) -> ApprovalTicket:
            now = self._clock()
            changed = connection.execute(
                "UPDATE tickets SET state = 'answered', answer = ?, answered_at = ? "
                "WHERE id = ? AND state = 'pending' AND expires_at > ?",
                (answer_json(answer), now, ticket_id, now),
            ).rowcount
            ticket = self._get(connection, ticket_id)
            if ticket is None or changed != 1:
                raise unanswerable(ticket_id, ticket)
            return ticket

        return self._transaction(run, True)  # type: ignore[no-any-return]

    def consume_ticket(self, ticket_id: str) -> ApprovalTicket | None:
        return self._transaction(lambda connection: self.consume(connection, ticket_id), True)  # type: ignore[no-any-return]

    def consume(self, connection: sqlite3.Connection, ticket_id: str) -> ApprovalTicket | None:
        """Resume the answered ticket in the caller's transaction on ``connection``; ``None``
        when it is not answered (or another connection resumed it first)."""
        now = self._clock()
        changed = connection.execute(
            "UPDATE tickets SET state = 'resumed', resumed_at = ? "
            "WHERE id = ? AND state = 'answered' AND expires_at > ?",
            (now, ticket_id, now),
        ).rowcount
        return self._get(connection, ticket_id) if changed == 1 else None

    def settled(self, ticket_ids: Sequence[str]) -> list[str]:
        """Those of ``ticket_ids`` no longer pending: answered, resumed or gone (one
        statement per :data:`_CHUNK` ids; expiry is the waiter's to see by the time)."""

        def run(connection: sqlite3.Connection) -> list[str]:
            pending: set[str] = set()
            for start in range(0, len(ticket_ids), _CHUNK):
                chunk = ticket_ids[start : start + _CHUNK]
                rows = connection.execute(
                    "SELECT id FROM tickets WHERE state = 'pending' AND id IN "
                    f"({', '.join('?' * len(chunk))})",
                    tuple(chunk),
                ).fetchall()
                pending.update(row[0] for row in rows)
            return [ticket_id for ticket_id in ticket_ids if ticket_id not in pending]

        return self._transaction(run, False)  # type: ignore[no-any-return]

    def _get(self, connection: sqlite3.Connection, ticket_id: str) -> ApprovalTicket | None:
        row = connection.execute(
            f"SELECT {_COLUMNS} FROM tickets WHERE id = ?", (ticket_id,)
        ).fetchone()
        return None if row is None else ticket_from_row(row, self._clock())

    def _open(self, connection: sqlite3.Connection, key: ApprovalKey) -> ApprovalTicket | None:
        row = connection.execute(
            f"SELECT {_COLUMNS} FROM tickets WHERE agent = ? AND tool = ? AND "
            f"arguments_sha256 = ? AND {_OPEN} ORDER BY created_at, rowid LIMIT 1",
            (key.agent, key.tool_name, key.arguments_sha256, self._clock()),
        ).fetchone()
        return None if row is None else ticket_from_row(row, self._clock())
