"""A call repeated while its ticket is open waits for the answer as long as the registry
waits for answers (``approval_timeout_ms``), like the call that opened it: the model's
repeat, at whichever process sharing the store, runs as soon as a person answers."""

from __future__ import annotations

import threading
from collections.abc import Callable

import anyio

from approval_helpers import code
from dsh_tools import MemoryApprovalStore, TicketAnswer
from test_approval_pending import call, make_registry, ticket_of


class WatchedStore(MemoryApprovalStore):
    """A store that says when a call starts waiting on it."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()

    def watch_ticket(self, ticket_id: str, changed: Callable[[], None]) -> Callable[[], None]:
        stop = super().watch_ticket(ticket_id, changed)
        self.waiting.set()
        return stop


def answer_once_waiting(store: WatchedStore, ticket_id: str, outcome: str) -> threading.Thread:
    def person() -> None:
        if store.waiting.wait(60):
            store.answer_ticket(ticket_id, TicketAnswer(outcome, "ana", "cli"))  # type: ignore[arg-type]

    thread = threading.Thread(target=person, daemon=True)
    thread.start()
    return thread


def test_a_repeated_call_waits_for_its_open_tickets_answer_and_runs_once() -> None:
    store = WatchedStore()
    asking, _, _ = make_registry(store)  # a process that does not wait: the call ends pending
    ticket_id = ticket_of(asking.execute_sync(call()))
    waiting, channel, ran = make_registry(store, approval_timeout_ms=60_000)
    person = answer_once_waiting(store, ticket_id, "allowed-once")
    assert code(waiting.execute_sync(call())) == "ok"
    person.join()
    assert ran == ["a.txt"]
    assert channel.asked == 0  # the repeat found the ticket: nobody was asked again


def test_a_repeat_on_an_event_loop_waits_too_and_a_rejection_wins() -> None:
    store = WatchedStore()
    asking, _, _ = make_registry(store)
    ticket_id = ticket_of(asking.execute_sync(call()))
    waiting, _, ran = make_registry(store, approval_timeout_ms=60_000)
    person = answer_once_waiting(store, ticket_id, "rejected")
    assert code(anyio.run(waiting.execute, call())) == "DENIED"
    person.join()
    assert ran == []
