"""The tickets half of :class:`~dsh_tools_plugins.approval_postgres.PostgresApprovalStore`.

One row per ticket in ``dsh_tools_approval_tickets``. An answer is one ``UPDATE ... WHERE
state = 'pending'`` and a resume one ``UPDATE ... WHERE state = 'answered' ... RETURNING``:
compare-and-set on the row, which exactly one connection wins whichever process or
machine it belongs to. Whether a ticket has expired is judged by the server's clock
(``now()``); its deadline is the one the asking process set. An answer notifies the
``dsh_tools_tickets`` channel with the ticket's id, which wakes the processes waiting on
it (``LISTEN``, one connection per store and process) at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dsh_tools.approvals import (
    ApprovalKey,
    ApprovalTicket,
    TicketAnswer,
    TicketState,
    TicketWatchers,
    wait_watched,
)
from dsh_tools.approvals._tickets import unanswerable

from .postgres_listen import Listener
from .ticket_columns import answer_json, json_text, ticket_from_row, ticket_row

if TYPE_CHECKING:
    import psycopg

    from .postgres import Connections

    Connection = psycopg.Connection[tuple[Any, ...]]

__all__ = ["CHANNEL", "NOW", "TICKETS_SCHEMA", "PostgresTickets", "consume"]

CHANNEL = "dsh_tools_tickets"
"""The channel an answer is announced on; the payload is the ticket's id."""
RECHECK_S = 1.0
"""How often the waited tickets are looked at, notification or not (one statement for
all of them)."""

TICKETS_SCHEMA = (
    "CREATE TABLE dsh_tools_approval_tickets (seq bigserial NOT NULL, id text PRIMARY KEY, "
    "agent text NOT NULL, tool text NOT NULL, call_id text NOT NULL, arguments text NOT NULL, "
    "arguments_sha256 text NOT NULL, reason text, card text, asked_by text, "
    "created_at double precision NOT NULL, expires_at double precision NOT NULL, "
    "state text NOT NULL, answer text, answered_at double precision, "
    "resumed_at double precision)",
    "CREATE INDEX dsh_tools_approval_tickets_by_call "
    "ON dsh_tools_approval_tickets (agent, tool, arguments_sha256)",
)
NOW = "extract(epoch from now())::double precision"
"""The server's time, in seconds since the epoch."""
_STORED = (
    "id, agent, tool, call_id, arguments, arguments_sha256, reason, card, asked_by, "
    "created_at, expires_at, state, answer, answered_at, resumed_at"
)
_COLUMNS = f"{_STORED}, {NOW}"
"""A ticket's columns, and the server's time to judge its expiry by."""
_TABLE = "dsh_tools_approval_tickets"


class PostgresTickets:
    """The :class:`~dsh_tools.approvals.TicketStore` methods of a store whose
    ``_connections`` reach the database: one transaction per operation."""

    _connections: Connections
    _listener: Listener
    _watchers: TicketWatchers

    def open_ticket(self, ticket: ApprovalTicket) -> ApprovalTicket:
        def run(connection: Connection) -> ApprovalTicket:
            # One opener per call at a time, so the same call never gets two tickets.
            connection.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (json_text([ticket.agent, ticket.tool_name, ticket.arguments_sha256]),),
            )
            found = _open(connection, ticket.key)
            if found is not None:
                return found
            connection.execute(
                f"INSERT INTO {_TABLE} ({_STORED}) VALUES ({', '.join(['%s'] * 15)})",
                ticket_row(ticket),
            )
            return ticket

        return self._connections.run(run)

    def get_ticket(self, ticket_id: str) -> ApprovalTicket | None:
        return self._connections.run(lambda connection: _get(connection, ticket_id))

    def find_ticket(self, key: ApprovalKey) -> ApprovalTicket | None:
        return self._connections.run(lambda connection: _open(connection, key))

    def list_tickets(
        self, *, agent: str | None = None, state: TicketState | None = None
    ) -> Sequence[ApprovalTicket]:
        def run(connection: Connection) -> list[ApprovalTicket]:
            where, parameters = ("", ()) if agent is None else ("WHERE agent = %s", (agent,))
            rows = connection.execute(
                f"SELECT {_COLUMNS} FROM {_TABLE} {where} ORDER BY created_at, seq", parameters
            ).fetchall()
            tickets = [ticket_from_row(row, row[-1]) for row in rows]
            return [ticket for ticket in tickets if state is None or ticket.state is state]

        return self._connections.run(run)

    def answer_ticket(self, ticket_id: str, answer: TicketAnswer) -> ApprovalTicket:
        def run(connection: Connection) -> ApprovalTicket:
            changed = connection.execute(
                f"UPDATE {_TABLE} SET state = 'answered', answer = %s, answered_at = {NOW} "
                f"WHERE id = %s AND state = 'pending' AND expires_at > {NOW}",
                (answer_json(answer), ticket_id),
            ).rowcount
            ticket = _get(connection, ticket_id)
            if ticket is None or changed != 1:
                raise unanswerable(ticket_id, ticket)
            connection.execute("SELECT pg_notify(%s, %s)", (CHANNEL, ticket_id))
            return ticket

        return self._connections.run(run)

    def consume_ticket(self, ticket_id: str) -> ApprovalTicket | None:
        return self._connections.run(lambda connection: consume(connection, ticket_id))

    def wait_for_answer(self, ticket_id: str, timeout_s: float) -> ApprovalTicket | None:
        return wait_watched(self.watch_ticket, self.get_ticket, ticket_id, timeout_s)

    def watch_ticket(self, ticket_id: str, changed: Callable[[], None]) -> Callable[[], None]:
        """Woken by the ticket's announcement (one listening connection per store: see
        :class:`~dsh_tools_plugins._stores.postgres_listen.Listener`), and at least every
        :data:`RECHECK_S` by one look at all waited tickets."""
        stop = self._watchers.watch(ticket_id, changed)
        self._listener.ensure()
        return stop

    def settled(self, ticket_ids: Sequence[str]) -> list[str]:
        """Those of ``ticket_ids`` no longer pending: answered, resumed or gone."""

        def run(connection: Connection) -> list[str]:
            rows = connection.execute(
                f"SELECT id FROM {_TABLE} WHERE state = 'pending' AND id = ANY(%s)",
                (list(ticket_ids),),
            ).fetchall()
            pending = {row[0] for row in rows}
            return [ticket_id for ticket_id in ticket_ids if ticket_id not in pending]

        return self._connections.run(run)


def consume(connection: Connection, ticket_id: str) -> ApprovalTicket | None:
    """Resume the answered ticket in the caller's transaction on ``connection``; ``None``
    when it is not answered (or another connection resumed it first)."""
    row = connection.execute(
        f"UPDATE {_TABLE} SET state = 'resumed', resumed_at = {NOW} "
        f"WHERE id = %s AND state = 'answered' AND expires_at > {NOW} "
        f"RETURNING {_COLUMNS}",
        (ticket_id,),
    ).fetchone()
    return None if row is None else ticket_from_row(row, row[-1])


def _get(connection: Connection, ticket_id: str) -> ApprovalTicket | None:
    row = connection.execute(
        f"SELECT {_COLUMNS} FROM {_TABLE} WHERE id = %s", (ticket_id,)
    ).fetchone()
    return None if row is None else ticket_from_row(row, row[-1])


def _open(connection: Connection, key: ApprovalKey) -> ApprovalTicket | None:
    row = connection.execute(
        f"SELECT {_COLUMNS} FROM {_TABLE} WHERE agent = %s AND tool = %s AND "
        f"arguments_sha256 = %s AND state IN ('pending', 'answered') AND expires_at > {NOW} "
        "ORDER BY created_at, seq LIMIT 1",
        (key.agent, key.tool_name, key.arguments_sha256),
    ).fetchone()
    return None if row is None else ticket_from_row(row, row[-1])
