"""The tools of the agent examples on durable engines (``temporal_agent.py``,
``dbos_agent.py``), and the person who approves: the same for both engines."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from dsh_tools import Ask, ToolRegistry, define_tool, hookimpl
from dsh_tools.approvals import TicketAnswer, TicketState
from dsh_tools_plugins.approval_store import SqliteApprovalStore


class AskBeforeWriting:
    """Writing a note asks a person; reading does not."""

    @hookimpl
    def dsh_tools_pre_execute(self, execution: Any) -> Ask | None:
        return Ask("writes a note") if execution.name == "write_note" else None


def notes_registry(store_path: Path) -> ToolRegistry:
    """Two tools; writing asks a person, through a ticket in a SQLite store that every
    worker and ``dsh-tools approvals`` share."""
    notes: list[str] = []

    def write_note(args: Any, ctx: Any) -> str:
        notes.append(str(args["text"]))
        return "noted"

    registry = ToolRegistry(
        approval=lambda request: "pending", approval_store=SqliteApprovalStore(store_path)
    )
    registry.register(
        define_tool(
            name="write_note",
            description="Write a note.",
            parameters={"text": {"type": "string", "required": True}},
            execute=write_note,
        )
    )
    registry.register(
        define_tool(
            name="read_notes",
            description="Read the notes.",
            parameters={},
            execute=lambda args, ctx: "; ".join(notes),
            metadata={"read_only": True},
        )
    )
    registry.add_plugin(AskBeforeWriting())
    return registry


def approve_when_asked(store_path: Path) -> str:
    """A person, elsewhere: waits for the pending ticket and approves it, as
    ``dsh-tools --approvals-store FILE approvals approve TICKET`` does; returns its id."""
    store = SqliteApprovalStore(store_path)
    while not (pending := store.list_tickets(state=TicketState.PENDING)):
        time.sleep(0.05)
    ticket = pending[0].id
    print(f"pending: dsh-tools --approvals-store {store_path} approvals approve {ticket}")
    store.answer_ticket(ticket, TicketAnswer("allowed-once", by="you", channel="cli"))
    return ticket
