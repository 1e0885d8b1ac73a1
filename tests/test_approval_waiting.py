"""Calls that wait for a person's answer hold no thread each: the store's one watcher
(its own answers, a file's polling thread, PostgreSQL's ``LISTEN``) wakes every call of
the process, whichever channel answered."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from approval_helpers import code
from dsh_tools import MemoryApprovalStore, TicketAnswer, TicketState
from dsh_tools.approvals import ApprovalKey, ApprovalTicket
from dsh_tools_plugins.approval_store import SqliteApprovalStore
from test_approval_pending import call, make_registry

WAITING = 100


class Unwatched:
    """A ticket store written before ``watch_ticket`` existed (the memory store's
    tickets, without it)."""

    def __init__(self) -> None:
        self._store = MemoryApprovalStore()

    def recall(self, key: ApprovalKey) -> Any:
        return self._store.recall(key)

    def remember(self, key: ApprovalKey, outcome: Any, **limits: Any) -> None:
        self._store.remember(key, outcome, **limits)

    def open_ticket(self, ticket: ApprovalTicket) -> ApprovalTicket:
        return self._store.open_ticket(ticket)

    def get_ticket(self, ticket_id: str) -> ApprovalTicket | None:
        return self._store.get_ticket(ticket_id)

    def find_ticket(self, key: ApprovalKey) -> ApprovalTicket | None:
        return self._store.find_ticket(key)

    def list_tickets(self, **which: Any) -> Sequence[ApprovalTicket]:
        return self._store.list_tickets(**which)

    def answer_ticket(self, ticket_id: str, answer: TicketAnswer) -> ApprovalTicket:
        return self._store.answer_ticket(ticket_id, answer)

    def consume_ticket(self, ticket_id: str) -> ApprovalTicket | None:
        return self._store.consume_ticket(ticket_id)

    def wait_for_answer(self, ticket_id: str, timeout_s: float) -> ApprovalTicket | None:
        return self._store.wait_for_answer(ticket_id, timeout_s)


def _stores(kind: str, tmp_path: Path) -> tuple[Any, Any]:
    """The store the waiting registry uses, and the one a person answers through."""
    if kind == "memory":
        store = MemoryApprovalStore()
        return store, store
    if kind == "sqlite":  # answered by another store on the same file: another process
        path = tmp_path / "approvals.sqlite3"
        return SqliteApprovalStore(path, poll_s=0.02), SqliteApprovalStore(path)
    unwatched = Unwatched()
    return unwatched, unwatched


@pytest.mark.parametrize("kind", ["memory", "sqlite", "unwatched"])
def test_a_hundred_waiting_calls_hold_no_thread_each(kind: str, tmp_path: Path) -> None:
    waiting, answering = _stores(kind, tmp_path)
    registry, _, ran = make_registry(waiting, approval_timeout_ms=60_000)
    results: list[Any] = []
    extra_threads: list[int] = []

    async def one(n: int) -> None:
        results.append(await registry.execute(call(f"{n}.txt")))

    async def person() -> None:
        before = threading.active_count()
        while len(pending := answering.list_tickets(state=TicketState.PENDING)) < WAITING:
            await anyio.sleep(0.02)
        await anyio.sleep(0.2)  # every call is in its wait now
        extra_threads.append(threading.active_count() - before)
        for ticket in pending:
            answering.answer_ticket(ticket.id, TicketAnswer("allowed-once", "ana", "cli"))  # type: ignore[arg-type]

    async def main() -> None:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                for n in range(WAITING):
                    group.start_soon(one, n)
                group.start_soon(person)

    anyio.run(main)
    assert [code(result) for result in results] == ["ok"] * WAITING
    assert sorted(ran) == sorted(f"{n}.txt" for n in range(WAITING))  # each ran once
    assert extra_threads[0] <= 2  # the store's one watcher, not a thread per call


def test_a_store_without_watch_ticket_wakes_a_waiter_under_execute_sync() -> None:
    store = Unwatched()
    registry, _, ran = make_registry(store, approval_timeout_ms=60_000)

    def person() -> None:
        while not (tickets := store.list_tickets(state=TicketState.PENDING)):
            threading.Event().wait(0.01)
        store.answer_ticket(tickets[0].id, TicketAnswer("allowed-once", "ana", "cli"))  # type: ignore[arg-type]

    answering = threading.Thread(target=person, daemon=True)
    answering.start()
    assert code(registry.execute_sync(call())) == "ok"
    answering.join()
    assert ran == ["a.txt"]
