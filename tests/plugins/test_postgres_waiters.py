"""Many calls waiting for answers in one process share one listening connection: the
PostgreSQL store stays within a bounded share of the server's connections however many
wait, and every waiter is woken by its own answer."""

from __future__ import annotations

import threading
import time

import pytest

from store_contract import answer, ticket

psycopg = pytest.importorskip("psycopg", reason="PostgreSQL driver psycopg is not installed")

from dsh_tools.approvals import ApprovalTicket, TicketState  # noqa: E402
from dsh_tools_plugins.approval_postgres import PostgresApprovalStore  # noqa: E402

WAITERS = 40


def _store_connections(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute(
            # This database only: other test sessions may share the server.
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'dsh-tools "
            "approvals' AND datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_forty_waiters_hold_a_few_connections_and_each_wakes_on_its_answer(
    postgres_url: str,
) -> None:
    waiting = PostgresApprovalStore(postgres_url, timeout_s=30)
    opened = [waiting.open_ticket(ticket(f"{n}.txt")) for n in range(WAITERS)]
    seen: dict[str, ApprovalTicket | None] = {}

    def wait(ticket_id: str) -> None:
        seen[ticket_id] = waiting.wait_for_answer(ticket_id, 120)

    threads = [threading.Thread(target=wait, args=(each.id,)) for each in opened]
    for thread in threads:
        thread.start()
    person = PostgresApprovalStore(postgres_url)
    try:
        # While they settle into waiting, the store's connections stay within its bound
        # (12 in use, and the listener's).
        for _ in range(20):
            busy = _store_connections(postgres_url)
            assert busy <= 13, busy
            time.sleep(0.1)
        for each in opened:
            person.answer_ticket(each.id, answer())
        for thread in threads:
            thread.join(60)
        assert not any(thread.is_alive() for thread in threads)
    finally:
        person.close()
        waiting.close()
    assert {t.state for t in seen.values() if t is not None} == {TicketState.ANSWERED}
    assert len(seen) == WAITERS
