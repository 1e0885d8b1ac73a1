"""How a ticket is kept in a row: the column values both durable stores (SQLite and
PostgreSQL) write and read back, so the two keep tickets in the same form."""

from __future__ import annotations

import json
from typing import Any

from dsh_tools._json import FrozenDict, snapshot
from dsh_tools.approvals import ApprovalTicket, TicketAnswer, TicketState

__all__ = [
    "answer_from_json",
    "answer_json",
    "json_object",
    "json_text",
    "ticket_from_row",
    "ticket_row",
]


def ticket_row(ticket: ApprovalTicket) -> tuple[object, ...]:
    """The ticket as one row of both stores' ticket tables, in their column order."""
    return (
        ticket.id,
        ticket.agent,
        ticket.tool_name,
        ticket.call_id,
        json_text(ticket.arguments),
        ticket.arguments_sha256,
        ticket.reason,
        None if ticket.card is None else json_text(ticket.card),
        None if ticket.asked_by is None else json_text(ticket.asked_by),
        ticket.created_at,
        ticket.expires_at,
        ticket.state.value,
        None if ticket.answer is None else answer_json(ticket.answer),
        ticket.answered_at,
        ticket.resumed_at,
    )


def ticket_from_row(row: tuple[Any, ...], now: float) -> ApprovalTicket:
    """A row (in :func:`ticket_row`'s order) read back as of ``now``: an open ticket whose
    time is up is expired. A malformed row raises ``ValueError`` naming the ticket (the
    store's error, once it names the store)."""
    try:
        state = TicketState(row[11])
        if state in (TicketState.PENDING, TicketState.ANSWERED) and now >= row[10]:
            state = TicketState.EXPIRED
        return ApprovalTicket(
            row[0],
            row[1],
            row[2],
            row[3],
            json_object(row[4]),
            row[5],
            row[6],
            None if row[7] is None else json_object(row[7]),
            None if row[8] is None else json_object(row[8]),
            float(row[9]),
            float(row[10]),
            state,
            None if row[12] is None else answer_from_json(row[12]),
            row[13],
            row[14],
        )
    except (ValueError, TypeError, KeyError) as error:
        raise ValueError(f"a malformed ticket row {row[0]!r}: {error}") from None


def json_text(value: object) -> str:
    """Canonical JSON text of a column (sorted keys, no whitespace, no NaN)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def json_object(text: object) -> FrozenDict:
    """A JSON object column read back, frozen; anything else is refused."""
    if type(text) is not str:
        raise TypeError(f"expected JSON text, found {type(text).__name__}")
    value = snapshot(json.loads(text))
    if type(value) is not FrozenDict:
        raise TypeError("expected a JSON object")
    return value


def answer_json(answer: TicketAnswer) -> str:
    """An answer as its column's JSON text."""
    return json_text(answer.to_json())


def answer_from_json(text: object) -> TicketAnswer:
    """An answer read back from its column."""
    return TicketAnswer.from_json(json_object(text))
