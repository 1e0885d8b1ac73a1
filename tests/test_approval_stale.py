"""What a person approved is what runs: an approved call whose card, drawn again when it
resumes, differs from the card its ticket showed (the file an edit's diff was drawn from
changed meanwhile) does not run; it ends ``APPROVAL_STALE``, and the same call made again
asks again, showing the change as it is now. Memory, SQLite and PostgreSQL stores alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from approval_helpers import ask_every_call, code
from dsh_tools import (
    TicketAnswer,
    TicketState,
    ToolExecutionInput,
    ToolRegistry,
    define_tool,
)
from dsh_tools._json import thaw
from dsh_tools.approvals import ApprovalTicket
from dsh_tools.presentation import GenericCallView, structure_call_view
from dsh_tools_plugins.files import edit_file_tool, write_file_tool
from dsh_tools_plugins.workspace import Workspace

ORIGINAL = "def f():\n    return 1\n"
EDIT = {"path": "app.py", "old_string": "return 1", "new_string": "return 10"}


def registry_over(root: Path, store: Any) -> ToolRegistry:
    """``edit_file`` and ``write_file`` in ``root``; every call asks, and waits for a
    person (the channel answers pending)."""
    registry = ToolRegistry(approval=lambda request: "pending", approval_store=store)
    workspace = Workspace(root)
    registry.register(edit_file_tool(workspace))
    registry.register(write_file_tool(workspace))
    ask_every_call(registry)
    return registry


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "app.py").write_text(ORIGINAL)
    return folder


def asked(registry: ToolRegistry, store: Any, name: str, arguments: dict[str, Any]) -> str:
    """Make the call, which waits for a person; approve its ticket, and return its id."""
    result = registry.execute_sync(ToolExecutionInput("c1", name, arguments, agent="coder"))
    assert code(result) == "APPROVAL_PENDING", result
    ticket_id: str = result.meta["approval"]["ticket"]
    store.answer_ticket(ticket_id, TicketAnswer("allowed-once", "ana", "cli"))
    return ticket_id


def shown_diff(ticket: ApprovalTicket | None) -> tuple[tuple[str | None, str], ...]:
    """The hunks the ticket's card showed the person."""
    assert ticket is not None
    assert ticket.card is not None
    card = structure_call_view(thaw(ticket.card))
    return tuple((diff.old_text, diff.new_text) for diff in getattr(card, "diffs", ()))


def test_an_edit_approved_on_a_file_that_changed_since_does_not_run(
    approval_store: Any, root: Path
) -> None:
    registry = registry_over(root, approval_store)
    ticket_id = asked(registry, approval_store, "edit_file", EDIT)
    assert shown_diff(approval_store.get_ticket(ticket_id)) == (
        (ORIGINAL, "def f():\n    return 10\n"),
    )
    changed = "def f():\n    if ready():\n        return 1\n"  # someone else's change
    (root / "app.py").write_text(changed)

    result = registry.resume_sync(ticket_id)

    assert code(result) == "APPROVAL_STALE"
    assert result.concludes_turn is False
    message = result.error.message
    assert 'tool "edit_file" did not run' in message
    assert ticket_id in message
    assert "changed after a person approved it" in message
    assert "Make the same call again" in message
    assert (root / "app.py").read_text() == changed  # untouched
    assert approval_store.get_ticket(ticket_id).state is TicketState.RESUMED  # spent
    assert code(registry.resume_sync(ticket_id)) == "DENIED"  # and never runs later
    assert (root / "app.py").read_text() == changed

    # The call made again asks again, showing the edit on the file as it is now.
    again = asked(registry, approval_store, "edit_file", EDIT)
    assert again != ticket_id
    assert shown_diff(approval_store.get_ticket(again)) == (
        (changed, "def f():\n    if ready():\n        return 10\n"),
    )
    assert code(registry.resume_sync(again)) == "ok"
    assert (root / "app.py").read_text() == "def f():\n    if ready():\n        return 10\n"


def test_an_edit_approved_on_an_unchanged_file_runs_once(approval_store: Any, root: Path) -> None:
    registry = registry_over(root, approval_store)
    ticket_id = asked(registry, approval_store, "edit_file", EDIT)
    assert code(registry.resume_sync(ticket_id)) == "ok"
    assert (root / "app.py").read_text() == "def f():\n    return 10\n"
    again = registry.resume_sync(ticket_id)  # resumed already: a journal replays the result
    assert code(again) == "DENIED" or again.meta["journal"] == "replayed", again
    assert (root / "app.py").read_text() == "def f():\n    return 10\n"  # it ran once


def test_the_repeated_call_checks_the_card_as_resume_does(root: Path) -> None:
    from dsh_tools import MemoryApprovalStore

    store = MemoryApprovalStore()
    registry = registry_over(root, store)
    asked(registry, store, "write_file", {"path": "app.py", "content": "x = 1\n"})
    (root / "app.py").write_text("precious = True\n")  # the person saw a diff from ORIGINAL

    arguments = {"path": "app.py", "content": "x = 1\n"}
    result = registry.execute_sync(ToolExecutionInput("c2", "write_file", arguments, agent="coder"))
    assert code(result) == "APPROVAL_STALE"
    assert (root / "app.py").read_text() == "precious = True\n"


def test_a_rejection_of_a_stale_ticket_still_says_rejected(root: Path) -> None:
    from dsh_tools import MemoryApprovalStore

    store = MemoryApprovalStore()
    registry = registry_over(root, store)
    result = registry.execute_sync(ToolExecutionInput("c1", "edit_file", EDIT, agent="coder"))
    ticket_id = result.meta["approval"]["ticket"]
    store.answer_ticket(ticket_id, TicketAnswer("rejected", "ana", "cli", feedback="no"))
    (root / "app.py").write_text("changed\nreturn 1\n")
    result = registry.resume_sync(ticket_id)
    assert code(result) == "DENIED"
    assert "rejected" in result.error.message
    assert (root / "app.py").read_text() == "changed\nreturn 1\n"


def test_any_tool_whose_card_shows_changing_state_is_held_to_the_card_approved() -> None:
    from dsh_tools import MemoryApprovalStore

    price = {"now": 10}
    ran: list[int] = []
    store = MemoryApprovalStore()
    registry = ToolRegistry(approval=lambda request: "pending", approval_store=store)
    registry.register(
        define_tool(
            name="buy",
            description="Buy at the current price.",
            parameters={"item": {"type": "string", "required": True}},
            execute=lambda args, ctx: ran.append(price["now"]) or "bought",
            present_call=lambda args: GenericCallView(f"Buy {args['item']} at {price['now']}"),
        )
    )
    ask_every_call(registry)
    ticket_id = asked(registry, store, "buy", {"item": "tea"})
    price["now"] = 99
    assert code(registry.resume_sync(ticket_id)) == "APPROVAL_STALE"
    assert ran == []
    price["now"] = 10
    again = asked(registry, store, "buy", {"item": "tea"})
    assert code(registry.resume_sync(again)) == "ok"
    assert ran == [10]


def test_a_stale_journaled_call_made_again_with_its_key_asks_again(
    approval_store: Any, root: Path
) -> None:
    registry = registry_over(root, approval_store)

    def edit() -> Any:
        call = ToolExecutionInput("c1", "edit_file", EDIT, agent="coder", idempotency_key="k-1")
        return registry.execute_sync(call)

    first = edit()
    ticket_id = first.meta["approval"]["ticket"]
    approval_store.answer_ticket(ticket_id, TicketAnswer("allowed-once", "ana", "cli"))
    (root / "app.py").write_text("def f():\n    if ready():\n        return 1\n")
    assert code(edit()) == "APPROVAL_STALE"
    # The key holds no entry of the stale call: made again, it asks (no replay of STALE).
    again = edit()
    assert code(again) == "APPROVAL_PENDING"
    assert again.meta["approval"]["ticket"] != ticket_id
