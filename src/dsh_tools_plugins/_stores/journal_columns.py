"""How a call journal entry is kept in a row: the columns both durable stores (SQLite
and PostgreSQL) write and read back (see :mod:`dsh_tools.approvals._journal`)."""

from __future__ import annotations

import json
from typing import Any

from dsh_tools._json import snapshot
from dsh_tools.approvals import JournalEntry, JournalState

from .ticket_columns import json_text

__all__ = ["JOURNAL_COLUMNS", "earlier_where", "entry_from_row", "entry_row", "filters"]

JOURNAL_COLUMNS = (
    "agent, key, tool, arguments_sha256, call_id, owner, state, started_at, "
    "lease_expires_at, finished_at, result, ticket_id, attempts"
)
"""The journal table's columns, in the order of :func:`entry_row`."""


def entry_row(entry: JournalEntry) -> tuple[object, ...]:
    """``entry`` as one row, in :data:`JOURNAL_COLUMNS`' order."""
    return (
        entry.agent,
        entry.key,
        entry.tool_name,
        entry.arguments_sha256,
        entry.call_id,
        entry.owner,
        entry.state.value,
        entry.started_at,
        entry.lease_expires_at,
        entry.finished_at,
        None if entry.state is not JournalState.FINISHED else json_text(entry.result),
        entry.ticket_id,
        entry.attempts,
    )


def entry_from_row(row: tuple[Any, ...], now: float) -> JournalEntry:
    """A row read back as of ``now``: a started entry whose lease ran out is unknown. A
    malformed row raises (``ValueError``, ``TypeError``)."""
    state = JournalState(row[6])
    if state is JournalState.STARTED and now >= row[8]:
        state = JournalState.UNKNOWN
    return JournalEntry(
        agent=row[0],
        key=row[1],
        tool_name=row[2],
        arguments_sha256=row[3],
        call_id=row[4],
        owner=row[5],
        state=state,
        started_at=float(row[7]),
        lease_expires_at=float(row[8]),
        finished_at=None if row[9] is None else float(row[9]),
        result=None if row[10] is None else snapshot(json.loads(row[10])),
        ticket_id=row[11],
        attempts=int(row[12]),
    )


def filters(
    agent: str | None, tool: str | None, arguments_sha256: str | None, mark: str
) -> tuple[str, tuple[str, ...]]:
    """The ``WHERE`` clause (and its parameters, placeholders ``mark``) that keeps the
    entries of ``agent``, ``tool`` and ``arguments_sha256``, those given; the columns in
    the order of the index by call, so the lookup of one call's entries uses it."""
    asked = [
        (column, value)
        for column, value in (
            ("agent", agent),
            ("tool", tool),
            ("arguments_sha256", arguments_sha256),
        )
        if value is not None
    ]
    if not asked:
        return "", ()
    clause = " AND ".join(f"{column} = {mark}" for column, _ in asked)
    return f"WHERE {clause}", tuple(value for _, value in asked)


def earlier_where(entry: JournalEntry, mark: str) -> tuple[str, tuple[str, ...]]:
    """The ``WHERE`` clause (and its parameters, placeholders ``mark``) that keeps the
    attempts of ``entry``'s call under other keys that never finished: running, or unknown
    (an owner killed less than a lease ago looks running), found through the index by
    call."""
    where, parameters = filters(entry.agent, entry.tool_name, entry.arguments_sha256, mark)
    clause = f"{where} AND key <> {mark} AND state = 'started'"
    return clause, (*parameters, entry.key)
