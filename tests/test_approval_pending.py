"""Pending approvals: a call a person answers later ends ``APPROVAL_PENDING`` with an
open ticket; the answer comes from anywhere, once; the call runs exactly once when
resumed or repeated, and never when the answer, the policy or the ticket says no."""

from __future__ import annotations

import itertools
import sqlite3
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from approval_helpers import add_write_tool, code
from dsh_tools import (
    ApprovalRequest,
    Ask,
    Deny,
    MemoryApprovalStore,
    TicketAnswer,
    TicketState,
    ToolExecutionInput,
    ToolRegistry,
    hookimpl,
)
from dsh_tools.approvals import TicketError, TicketExpiredError, TicketNotFoundError
from dsh_tools.testing import CallRecorder
from dsh_tools_plugins.approval_store import SqliteApprovalStore


class AskAlways:
    def __init__(self, **ask: Any) -> None:
        self.ask = ask

    @hookimpl
    def dsh_tools_pre_execute(self, execution: Any) -> Ask:
        return Ask("writes files", detail={"rule": "ask write", "line": 3}, **self.ask)


class Channel:
    """Answers pending, and counts how often it was asked."""

    def __init__(self) -> None:
        self.asked = 0

    def __call__(self, request: ApprovalRequest) -> str:
        self.asked += 1
        return "pending"


def make_registry(
    store: Any = None, ask: dict[str, Any] | None = None, **options: Any
) -> tuple[ToolRegistry, Channel, list[str]]:
    channel = Channel()
    registry = ToolRegistry(approval=channel, approval_store=store, **options)
    ran = add_write_tool(registry)
    registry.add_plugin(AskAlways(**(ask or {})), name="permissions")
    return registry, channel, ran


_CALL_IDS = itertools.count(1)


def call(path: str = "a.txt", agent: str = "coder") -> ToolExecutionInput:
    """The model's call of ``write``: a new call id each time, as a model's repeat has
    (the call journal of a durable store replays a repeat of one call id)."""
    return ToolExecutionInput(f"c{next(_CALL_IDS)}", "write", {"path": path}, agent=agent)


def ticket_of(result: Any) -> str:
    assert code(result) == "APPROVAL_PENDING", result
    ticket_id: str = result.meta["approval"]["ticket"]
    return ticket_id


def approve(store: Any, ticket_id: str, outcome: str = "allowed-once", **more: Any) -> None:
    store.answer_ticket(ticket_id, TicketAnswer(outcome, "ana", "cli", **more))  # type: ignore[arg-type]


def test_a_pending_answer_ends_the_call_with_a_ticket() -> None:
    store = MemoryApprovalStore()
    registry, _channel, ran = make_registry(store)
    made = call()
    result = registry.execute_sync(made)
    ticket_id = ticket_of(result)
    assert result.concludes_turn is True
    assert "waiting for a person" in result.error.message
    ticket = store.get_ticket(ticket_id)
    assert ticket is not None
    assert (ticket.agent, ticket.tool_name, ticket.call_id) == ("coder", "write", made.call_id)
    assert ticket.arguments == {"path": "a.txt"}
    assert ticket.key.arguments_sha256 == ticket.arguments_sha256
    assert ticket.intact()
    assert ticket.reason == "writes files"
    assert dict(ticket.asked_by or {}) == {"plugin": "permissions", "rule": "ask write", "line": 3}
    assert ticket.card is not None
    assert ticket.card["card"] == "generic"
    assert ticket.created_at < ticket.expires_at
    assert ran == []


def test_the_same_call_repeated_gets_its_ticket_back_without_asking_again() -> None:
    store = MemoryApprovalStore()
    registry, channel, ran = make_registry(store)
    first = ticket_of(registry.execute_sync(call()))
    assert ticket_of(registry.execute_sync(call())) == first
    assert channel.asked == 1
    assert ticket_of(registry.execute_sync(call("b.txt"))) != first
    assert len(store.list_tickets()) == 2
    assert ran == []


def test_an_approved_ticket_is_taken_by_the_repeated_call_once() -> None:
    store = MemoryApprovalStore()
    registry, _channel, ran = make_registry(store)
    ticket_id = ticket_of(registry.execute_sync(call()))
    approve(store, ticket_id)
    assert code(registry.execute_sync(call())) == "ok"
    assert ran == ["a.txt"]
    assert store.get_ticket(ticket_id).state is TicketState.RESUMED
    # Used up: the next identical call asks again and gets a new ticket.
    assert ticket_of(registry.execute_sync(call())) != ticket_id
    assert ran == ["a.txt"]


def test_resume_runs_the_call_once_and_says_so_afterwards() -> None:
    store = MemoryApprovalStore()
    registry, _channel, ran = make_registry(store)
    ticket_id = ticket_of(registry.execute_sync(call()))
    assert code(registry.resume_sync(ticket_id)) == "APPROVAL_PENDING"
    approve(store, ticket_id)
    assert code(registry.resume_sync(store.get_ticket(ticket_id))) == "ok"
    again = registry.resume_sync(ticket_id)
    assert code(again) == "DENIED"
    assert "already resumed" in again.error.message
    assert code(anyio.run(registry.resume, ticket_id)) == "DENIED"
    assert ran == ["a.txt"]


def test_a_rejection_carries_its_feedback() -> None:
    store = MemoryApprovalStore()
    registry, _, ran = make_registry(store)
    ticket_id = ticket_of(registry.execute_sync(call()))
    approve(store, ticket_id, "rejected", feedback="write to b.txt instead")
    result = registry.resume_sync(ticket_id)
    assert (code(result), result.error.message) == (
        "DENIED",
        'the user rejected tool "write": write to b.txt instead',
    )
    assert ran == []


def test_an_always_answer_is_remembered() -> None:
    store = MemoryApprovalStore()
    registry, channel, ran = make_registry(store)
    ticket_id = ticket_of(registry.execute_sync(call()))
    approve(store, ticket_id, "allowed-always")
    assert code(registry.execute_sync(call())) == "ok"
    assert code(registry.execute_sync(call())) == "ok"
    assert channel.asked == 1
    assert ran == ["a.txt", "a.txt"]


def test_an_expired_ticket_cannot_be_answered_or_resumed() -> None:
    now = [1000.0]
    store = MemoryApprovalStore(clock=lambda: now[0])
    registry, _, ran = make_registry(store, ask={"expires_in_s": 60})
    ticket_id = ticket_of(registry.execute_sync(call()))
    ticket = store.get_ticket(ticket_id)
    assert ticket.expires_at - ticket.created_at == pytest.approx(60)
    now[0] = ticket.expires_at + 1
    with pytest.raises(TicketExpiredError, match="expired"):
        approve(store, ticket_id)
    result = registry.resume_sync(ticket_id)
    assert code(result) == "APPROVAL_EXPIRED"
    assert ran == []


def test_an_approval_expires_if_not_resumed_in_time() -> None:
    now = [1000.0]
    store = MemoryApprovalStore(clock=lambda: now[0])
    registry, _, ran = make_registry(store, approval_expiry_s=60)
    ticket_id = ticket_of(registry.execute_sync(call()))
    approve(store, ticket_id)
    now[0] = store.get_ticket(ticket_id).expires_at
    assert code(registry.resume_sync(ticket_id)) == "APPROVAL_EXPIRED"
    assert ran == []


def test_a_policy_that_denies_now_beats_the_approval() -> None:
    store = MemoryApprovalStore()
    registry, _, ran = make_registry(store)
    ticket_id = ticket_of(registry.execute_sync(call()))
    approve(store, ticket_id)

    class Frozen:
        @hookimpl(tryfirst=True)
        def dsh_tools_pre_execute(self, execution: Any) -> Deny:
            return Deny("the repository is frozen")

    registry.add_plugin(Frozen())
    result = registry.resume_sync(ticket_id)
    assert (code(result), result.error.message) == ("DENIED", "the repository is frozen")
    assert ran == []


def test_guards_still_run_after_an_approval() -> None:
    store = MemoryApprovalStore()
    registry, _, ran = make_registry(store)
    ticket_id = ticket_of(registry.execute_sync(call()))
    approve(store, ticket_id)
    registry.guard(lambda execution: "disk is read-only")
    assert registry.resume_sync(ticket_id).error.message == "disk is read-only"
    assert ran == []


def test_a_ticket_whose_stored_arguments_changed_is_refused(tmp_path: Path) -> None:
    store = SqliteApprovalStore(tmp_path / "approvals.sqlite3")
    registry, _, ran = make_registry(store)
    ticket_id = ticket_of(registry.execute_sync(call("notes.txt")))
    approve(store, ticket_id)
    with sqlite3.connect(tmp_path / "approvals.sqlite3") as connection:
        connection.execute(
            "UPDATE tickets SET arguments = ? WHERE id = ?", ('{"path":"/etc/passwd"}', ticket_id)
        )
    result = registry.resume_sync(ticket_id)
    assert code(result) == "POLICY_ERROR"
    assert "no longer match their hash" in result.error.message
    assert ran == []


@pytest.mark.parametrize(
    ("column", "value"), [("state", "approved-ish"), ("arguments", "not json"), ("answer", "[]")]
)
def test_a_malformed_ticket_runs_nothing(tmp_path: Path, column: str, value: str) -> None:
    store = SqliteApprovalStore(tmp_path / "approvals.sqlite3")
    registry, _, ran = make_registry(store)
    ticket_id = ticket_of(registry.execute_sync(call()))
    approve(store, ticket_id)
    with sqlite3.connect(tmp_path / "approvals.sqlite3") as connection:
        connection.execute(f"UPDATE tickets SET {column} = ? WHERE id = ?", (value, ticket_id))
    with pytest.raises(TicketError, match="could not be read from the approval store"):
        registry.resume_sync(ticket_id)
    result = registry.execute_sync(call())
    if column == "state":  # not an open ticket: the repeated call opens a new one
        assert ticket_of(result) != ticket_id
    else:
        assert code(result) == "POLICY_ERROR"
        assert "approval store SqliteApprovalStore failed to find a ticket" in result.error.message
    assert ran == []


def test_another_agents_ticket_and_an_unknown_one_are_refused() -> None:
    store = MemoryApprovalStore()
    registry, _, ran = make_registry(store)
    ticket_id = ticket_of(registry.scope("coder").execute_sync(call(agent="coder")))
    approve(store, ticket_id)
    with pytest.raises(TicketError, match='belongs to agent "coder", not "reviewer"'):
        registry.scope("reviewer").resume_sync(ticket_id)
    with pytest.raises(TicketNotFoundError, match="does not exist"):
        registry.resume_sync("t-nope")
    with pytest.raises(TypeError, match="ApprovalTicket or its id"):
        registry.resume_sync(3)  # type: ignore[arg-type]
    assert code(registry.scope("coder").resume_sync(ticket_id)) == "ok"
    assert ran == ["a.txt"]


class BrokenStore(MemoryApprovalStore):
    def open_ticket(self, ticket: Any) -> Any:
        raise OSError("disk gone")

    def find_ticket(self, key: Any) -> Any:
        if self.broken_find:
            raise OSError("disk gone")
        return None

    broken_find = False


@pytest.mark.parametrize("broken_find", [False, True])
def test_a_store_that_fails_never_allows(broken_find: bool) -> None:
    store = BrokenStore()
    store.broken_find = broken_find
    registry, _, ran = make_registry(store)
    result = registry.execute_sync(call())
    assert code(result) == "POLICY_ERROR"
    assert "approval store BrokenStore failed to" in result.error.message
    assert "disk gone" in result.error.message
    assert ran == []


def test_pending_without_a_ticket_store_fails_closed() -> None:
    class AnswersOnly:
        def recall(self, key: Any) -> None:
            return None

        def remember(self, key: Any, outcome: Any) -> None:
            pass

    registry, _, ran = make_registry(AnswersOnly())
    result = registry.execute_sync(call())
    assert code(result) == "POLICY_ERROR"
    assert "keeps no tickets" in result.error.message
    assert ran == []


# ------------------------------------------------------------------ waiting in process


def answer_when_asked(store: Any, outcome: str = "allowed-once") -> threading.Thread:
    """A person in another thread who answers the first ticket that appears."""

    def person() -> None:
        while not (tickets := store.list_tickets(state=TicketState.PENDING)):
            threading.Event().wait(0.01)
        approve(store, tickets[0].id, outcome)

    thread = threading.Thread(target=person, daemon=True)
    thread.start()
    return thread


def test_execute_sync_waits_for_an_answer_from_another_channel() -> None:
    store = MemoryApprovalStore()
    registry, _, ran = make_registry(store, approval_timeout_ms=60_000)
    person = answer_when_asked(store)
    assert code(registry.execute_sync(call())) == "ok"
    person.join()
    assert ran == ["a.txt"]


def test_execute_waits_on_an_event_loop_too(tmp_path: Path) -> None:
    store = SqliteApprovalStore(tmp_path / "approvals.sqlite3", poll_s=0.01)
    registry, _, ran = make_registry(store, approval_timeout_ms=60_000)
    person = answer_when_asked(store, "rejected")
    assert code(anyio.run(registry.execute, call())) == "DENIED"
    person.join()
    assert ran == []


@pytest.mark.parametrize("outcome", ["pending", "expired"])
def test_a_wait_in_vain_ends_as_configured(outcome: str) -> None:
    store = MemoryApprovalStore()
    registry, _, ran = make_registry(store, approval_timeout_ms=1, approval_timeout=outcome)
    result = registry.execute_sync(call())
    assert code(result) == f"APPROVAL_{outcome.upper()}"
    ticket = store.get_ticket(result.meta["approval"]["ticket"])
    assert ticket.state is (TicketState.PENDING if outcome == "pending" else TicketState.EXPIRED)
    assert ran == []


def test_bad_waiting_options_are_refused() -> None:
    from dsh_tools import DefinitionError

    with pytest.raises(DefinitionError, match="approval_timeout_ms"):
        ToolRegistry(approval_timeout_ms=-1)
    with pytest.raises(DefinitionError, match="approval_timeout must be"):
        ToolRegistry(approval_timeout="later")  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match="approval_expiry_s"):
        ToolRegistry(approval_expiry_s=0)
    with pytest.raises(ValueError, match="expires_in_s"):
        Ask("x", expires_in_s=float("inf"))


def test_waiting_options_replaced_apply_to_the_next_call_and_are_checked() -> None:
    from dsh_tools import DefinitionError

    store = MemoryApprovalStore()
    registry, _, _ = make_registry(store)
    assert code(registry.execute_sync(call("a.txt"))) == "APPROVAL_PENDING"

    registry.approval_waiting = (1, "expired", 60.0)

    assert registry.approval_waiting == (1, "expired", 60.0)
    assert code(registry.execute_sync(call("b.txt"))) == "APPROVAL_EXPIRED"
    with pytest.raises(DefinitionError, match="approval_timeout must be"):
        registry.approval_waiting = (1, "later", 60.0)
    with pytest.raises(DefinitionError, match=r"approval_waiting must be \(approval_timeout_ms"):
        registry.approval_waiting = 1  # type: ignore[assignment]
    assert registry.approval_waiting == (1, "expired", 60.0)


def test_records_and_the_audit_log_show_pending_answered_and_resumed(tmp_path: Path) -> None:
    from dsh_tools_plugins.audit import AuditLog, replay

    store = MemoryApprovalStore()
    registry, _, _ = make_registry(store)
    registry.add_plugin(AuditLog(tmp_path / "audit.jsonl"))
    ticket_id = ticket_of(registry.execute_sync(call()))
    approve(store, ticket_id)
    registry.resume_sync(ticket_id)
    asked, resumed = (r.record for r in replay(tmp_path / "audit.jsonl", registry))
    assert asked is not None
    assert resumed is not None
    assert [(s.source, s.decision) for s in asked.of("approval")] == [
        ("approval service", "pending"),
        ("approval tickets", "pending"),
    ]
    assert asked.of("approval")[1].detail["ticket"] == ticket_id  # type: ignore[index]
    assert asked.outcome == "APPROVAL_PENDING"
    assert asked.decided_by is not None
    assert asked.decided_by.decision == "ask"
    (step,) = resumed.of("approval")
    assert (step.source, step.decision) == ("approval tickets", "allowed-once")
    assert step.reason == "answered by ana via cli"
    assert step.detail is not None
    assert step.detail["ticket"] == ticket_id
    assert step.detail["answered_at"] <= step.detail["resumed_at"]
    assert "approval     approval tickets: allowed-once: answered by ana via cli" in "\n".join(
        resumed.lines()
    )
    again = registry.resume_sync(ticket_id)
    assert code(again) == "DENIED"


def test_a_wait_and_its_expiry_are_steps_of_the_record() -> None:
    store = MemoryApprovalStore()
    recorder = CallRecorder()
    registry, _, _ = make_registry(
        store, tracer=recorder, approval_timeout_ms=1, approval_timeout="expired"
    )
    registry.execute_sync(call())
    record = recorder.calls[0].record
    steps = [(s.source, s.decision) for s in record.of("approval")]
    assert steps == [
        ("approval service", "pending"),
        ("approval tickets", "waiting"),
        ("approval tickets", "expired"),
    ]
    assert record.decided_by is not None
    assert record.decided_by.decision == "expired"


def test_resume_takes_the_hosts_signal_and_progress_listener() -> None:
    from dsh_tools import CancelSource, ToolRunContext, define_tool

    registry = ToolRegistry(approval=lambda request: "pending")
    heard: list[Any] = []

    def write(args: Any, ctx: ToolRunContext) -> str:
        ctx.report_progress(1, 2, "half")
        return "written" if not ctx.signal.cancelled else "cancelled"

    registry.register(
        define_tool(
            name="write",
            description="Write.",
            parameters={"path": {"type": "string", "required": True}},
            execute=write,
        )
    )
    registry.add_plugin(AskAlways())
    tickets = []
    for path in ("a.txt", "b.txt"):
        call = ToolExecutionInput(path, "write", {"path": path}, agent="me")
        ticket = registry.execute_sync(call).meta["approval"]["ticket"]  # type: ignore[index]
        answer = TicketAnswer("allowed-once", by="ana", channel="cli")
        registry.approval_store.answer_ticket(ticket, answer)  # type: ignore[attr-defined]
        tickets.append(ticket)
    listened = registry.resume_sync(tickets[0], on_progress=lambda _, event: heard.append(event))
    cancelled = CancelSource()
    cancelled.cancel("the host stopped")

    aborted = registry.resume_sync(tickets[1], signal=cancelled.signal)

    assert listened.text == "written"
    assert [event.line() for event in heard] == ["1 of 2: half"]
    assert code(aborted) == "ABORTED_BEFORE_DISPATCH"
