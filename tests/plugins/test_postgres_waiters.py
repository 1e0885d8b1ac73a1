"""However many threads of one process use the PostgreSQL store, it stays within a bounded
share of the server's connections: at most 12 in use at once, and one listening
connection for every call waiting for an answer, each woken by its own answer."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from store_contract import answer, ticket

psycopg = pytest.importorskip("psycopg", reason="PostgreSQL driver psycopg is not installed")

from dsh_tools.approvals import ApprovalTicket, TicketState  # noqa: E402
from dsh_tools_plugins.approval_postgres import PostgresApprovalStore  # noqa: E402

THREADS = 40


class OpenConnections:
    """The most connections open at once among those made during a test. Counted on the
    client: the server lists a closed connection's backend until it has exited, and
    other tests' stores may still hold connections to the same database."""

    def __init__(self) -> None:
        self.made: list[psycopg.Connection[tuple[object, ...]]] = []
        self.most = 0

    def add(self, connection: psycopg.Connection[tuple[object, ...]]) -> None:
        self.made.append(connection)
        self.most = max(self.most, self.open())

    def open(self) -> int:
        return sum(not each.closed for each in list(self.made))


@pytest.fixture
def open_connections(monkeypatch: pytest.MonkeyPatch) -> OpenConnections:
    counted = OpenConnections()
    connect = psycopg.connect

    def counting(*args: Any, **kwargs: Any) -> psycopg.Connection[tuple[object, ...]]:
        connection = connect(*args, **kwargs)
        counted.add(connection)
        return connection

    monkeypatch.setattr(psycopg, "connect", counting)
    return counted


def test_forty_threads_reading_at_once_use_at_most_twelve_connections(
    postgres_url: str, open_connections: OpenConnections
) -> None:
    store = PostgresApprovalStore(postgres_url, timeout_s=30)
    opened = store.open_ticket(ticket("a.txt"))
    read: list[ApprovalTicket | None] = []
    threads = [
        threading.Thread(target=lambda: read.append(store.get_ticket(opened.id)))
        for _ in range(THREADS)
    ]
    # Every read waits behind this lock, so each thread would hold a connection at once.
    with psycopg.connect(postgres_url, autocommit=True) as locking, locking.transaction():
        locking.execute("LOCK TABLE dsh_tools_approval_tickets IN ACCESS EXCLUSIVE MODE")
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while open_connections.open() < 12 + 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # time for any connection beyond the bound to show
    for thread in threads:
        thread.join(60)
    store.close()
    assert [each.id if each else None for each in read] == [opened.id] * THREADS
    assert open_connections.most == 12 + 1  # and the one that held the lock


def test_forty_waiters_hold_a_few_connections_and_each_wakes_on_its_answer(
    postgres_url: str, open_connections: OpenConnections
) -> None:
    waiting = PostgresApprovalStore(postgres_url, timeout_s=30)
    opened = [waiting.open_ticket(ticket(f"{n}.txt")) for n in range(THREADS)]
    seen: dict[str, ApprovalTicket | None] = {}

    def wait(ticket_id: str) -> None:
        seen[ticket_id] = waiting.wait_for_answer(ticket_id, 120)

    threads = [threading.Thread(target=wait, args=(each.id,)) for each in opened]
    for thread in threads:
        thread.start()
    person = PostgresApprovalStore(postgres_url)
    try:
        # While they settle into waiting, the store's connections stay within its bound
        # (12 in use, and the listener's) rather than one each.
        time.sleep(2)
        assert 1 < open_connections.most <= 13, open_connections.most
    finally:
        # Answered even when the count failed: no waiter outlives the test's schema.
        for each in opened:
            person.answer_ticket(each.id, answer())
        for thread in threads:
            thread.join(60)
        person.close()
        waiting.close()
    assert not any(thread.is_alive() for thread in threads)
    assert {t.state for t in seen.values() if t is not None} == {TicketState.ANSWERED}
    assert len(seen) == THREADS
