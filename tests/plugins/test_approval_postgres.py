"""The PostgreSQL approval store: shared between processes, timed by the server's clock,
and failing closed (with a message that names the store but never its password) when the
server cannot be reached or the database is not one it knows."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from deploy_calls import allowed_deploy, code
from dsh_tools import (
    ApprovalKey,
    ApprovalOutcome,
)
from dsh_tools_plugins.approval_store import ApprovalStoreError
from store_contract import StoreContract

psycopg = pytest.importorskip("psycopg", reason="PostgreSQL driver psycopg is not installed")

from dsh_tools_plugins.approval_postgres import (  # noqa: E402
    PostgresApprovalStore,
    create_schema,
)

ALLOWED = ApprovalOutcome.ALLOWED_ALWAYS
KEY = ApprovalKey.for_call("ops", "deploy", {"service": "web"})
SECRET = "s3cr3t-pa55word"


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_server_fails_closed_and_never_shows_the_password() -> None:
    port = closed_port()
    store = PostgresApprovalStore(f"postgresql://dsh:{SECRET}@127.0.0.1:{port}/approvals")
    with pytest.raises(ApprovalStoreError) as raised:
        store.check()
    message = str(raised.value)
    assert message.startswith(f"approval store postgresql://dsh@127.0.0.1:{port}/approvals: ")
    assert "Connection refused" in message
    assert SECRET not in message
    result, ran = allowed_deploy(store)
    assert code(result) == "POLICY_ERROR"
    assert "approval store postgresql://dsh@127.0.0.1" in result.error.message
    assert SECRET not in result.error.message
    assert ran == []


def test_a_wrong_password_is_refused_without_showing_it(postgres_url: str) -> None:
    parts = psycopg.conninfo.conninfo_to_dict(postgres_url)
    url = f"postgresql://{parts['user']}:{SECRET}@{parts['host']}:{parts['port']}/{parts['dbname']}"
    with pytest.raises(ApprovalStoreError, match="password authentication failed") as raised:
        PostgresApprovalStore(url).check()
    assert SECRET not in str(raised.value)


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://dsh:{SECRET}@db:notaport/approvals",
        f"postgresql://dsh:{SECRET}@db/approvals?sslmode=sometimes",
        f"postgresql://dsh:{SECRET}@db/approvals?no_such_option={SECRET}",
    ],
)
def test_a_malformed_url_is_refused_at_once_without_showing_the_password(url: str) -> None:
    with pytest.raises(ApprovalStoreError) as raised:
        PostgresApprovalStore(url).check()
    assert SECRET not in str(raised.value)


@pytest.mark.parametrize("location", ["sqlite:///tmp/x", "/tmp/approvals.sqlite3", ""])
def test_only_a_postgresql_url_makes_a_postgresql_store(location: str) -> None:
    with pytest.raises(ApprovalStoreError, match=r"needs a postgresql:// URL"):
        PostgresApprovalStore(location)


def test_grants_end_by_the_server_clock_not_the_clients(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresApprovalStore(postgres_url)
    monkeypatch.setattr(time, "time", lambda: 4_000_000_000.0)  # the client is in 2096
    store.remember(KEY, ALLOWED, expires_in_s=3600)
    monkeypatch.setattr(time, "time", lambda: 0.0)  # now in 1970
    assert store.recall(KEY) is ALLOWED
    assert store.use(KEY) is ALLOWED
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT expires_at - remembered_at, expires_at > now() FROM dsh_tools_approvals"
        ).fetchone()
    assert row is not None
    assert (row[0].total_seconds(), row[1]) == (3600.0, True)
    store.close()


def test_processes_share_answers_and_grants(postgres_url: str) -> None:
    script = textwrap.dedent(
        """
        import sys
        from dsh_tools import ApprovalKey, ApprovalOutcome
        from dsh_tools_plugins.approval_postgres import PostgresApprovalStore

        store = PostgresApprovalStore(sys.argv[1])
        key = ApprovalKey.for_call("ops", "deploy", {"service": "web"})
        if sys.argv[2] == "remember":
            store.remember(key, ApprovalOutcome.ALLOWED_ALWAYS, uses=6)
        else:
            print(sum(store.use(key) is not None for _ in range(3)))
        """
    )
    command = [sys.executable, "-c", script, postgres_url]
    subprocess.run([*command, "remember"], check=True, timeout=60)
    users = [
        subprocess.Popen([*command, "use"], stdout=subprocess.PIPE, text=True) for _ in range(4)
    ]
    taken = [int(process.communicate(timeout=120)[0]) for process in users]
    assert [process.returncode for process in users] == [0] * 4
    assert sum(taken) == 6
    assert PostgresApprovalStore(postgres_url).recall(KEY) is None


def test_a_database_of_another_schema_version_is_refused(postgres_url: str) -> None:
    store = PostgresApprovalStore(postgres_url)
    store.check()
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("UPDATE dsh_tools_schema SET version = 9")
    with pytest.raises(ApprovalStoreError, match="schema version 9, expected at most 2"):
        PostgresApprovalStore(postgres_url).recall(KEY)
    store.close()


def test_a_version_1_database_is_upgraded_keeping_its_tickets(postgres_url: str) -> None:
    from dsh_tools import ApprovalTicket, TicketAnswer

    store = PostgresApprovalStore(postgres_url)
    ticket = store.open_ticket(
        ApprovalTicket.new(
            KEY,
            "c1",
            {"service": "web"},  # type: ignore[arg-type]
            created_at=time.time(),
            expires_at=time.time() + 3600,
        )
    )
    store.answer_ticket(ticket.id, TicketAnswer("allowed-always", "ana", "cli"))  # type: ignore[arg-type]
    store.close()
    old_answer = (
        '{"any_arguments":false,"by":"ana","channel":"cli","feedback":null,'
        '"outcome":"allowed-always"}'
    )
    with psycopg.connect(postgres_url, autocommit=True) as connection:  # as version 1 left it
        connection.execute("UPDATE dsh_tools_approval_tickets SET answer = %s", (old_answer,))
        connection.execute("UPDATE dsh_tools_schema SET version = 1 WHERE component = 'approvals'")
    with pytest.raises(ApprovalStoreError, match=r"older .*approvals at version 1, needs 2"):
        PostgresApprovalStore(postgres_url).check()  # opening a store never upgrades it
    assert [str(step) for step in create_schema(postgres_url)] == [
        "approvals: upgraded from version 1 to 2",
        "limits: at version 1 already",
        "journal: at version 1 already",
    ]
    again = PostgresApprovalStore(postgres_url)
    kept = again.get_ticket(ticket.id)
    assert kept is not None
    assert kept.answer is not None
    assert (kept.answer.by, kept.answer.uses, kept.answer.expires_in_s) == ("ana", None, None)
    again.close()
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        # Version 1 code refuses the database now: it would read a grant that ends as one
        # that never does.
        version = "SELECT version FROM dsh_tools_schema WHERE component = 'approvals'"
        assert connection.execute(version).fetchone() == (2,)


def tables(url: str) -> list[str]:
    with psycopg.connect(url, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = current_schema() ORDER BY table_name"
        ).fetchall()
    return [row[0] for row in rows]


def test_opening_a_store_runs_no_ddl_and_names_the_command_that_creates_it(
    empty_postgres_url: str,
) -> None:
    store = PostgresApprovalStore(empty_postgres_url)
    with pytest.raises(ApprovalStoreError) as raised:
        store.recall(KEY)
    message = str(raised.value)
    assert message.startswith(f"approval store {store.url}: no dsh-tools schema in this database")
    assert "`dsh-tools approvals init-store --approvals-store URL`" in message
    assert tables(empty_postgres_url) == []
    result, ran = allowed_deploy(store)
    assert code(result) == "POLICY_ERROR"
    assert "approvals init-store" in result.error.message
    assert ran == []


def test_a_missing_component_is_named_and_created_by_the_explicit_step(
    empty_postgres_url: str,
) -> None:
    steps = create_schema(empty_postgres_url)
    assert [str(step) for step in steps] == [
        "approvals: created at version 2",
        "limits: created at version 1",
        "journal: created at version 1",
    ]
    with psycopg.connect(empty_postgres_url, autocommit=True) as connection:
        connection.execute("DROP TABLE dsh_tools_call_journal")
        connection.execute("DELETE FROM dsh_tools_schema WHERE component = 'journal'")
    with pytest.raises(ApprovalStoreError, match=r"older .*journal missing, needs 1.*init-store"):
        PostgresApprovalStore(empty_postgres_url).check()
    assert [str(step) for step in create_schema(empty_postgres_url)][2] == (
        "journal: created at version 1"
    )
    checked = PostgresApprovalStore(empty_postgres_url)
    checked.check()
    checked.close()
    assert "dsh_tools_call_journal" in tables(empty_postgres_url)


def test_a_store_asked_to_create_its_schema_does_so_once(empty_postgres_url: str) -> None:
    first = PostgresApprovalStore(empty_postgres_url, create_schema=True)
    second = PostgresApprovalStore(empty_postgres_url, create_schema=True)
    first.remember(KEY, ALLOWED)
    assert second.recall(KEY) is ALLOWED
    third = PostgresApprovalStore(empty_postgres_url)
    assert third.recall(KEY) is ALLOWED
    for store in (first, second, third):
        store.close()


def test_a_tampered_outcome_is_refused(postgres_url: str) -> None:
    store = PostgresApprovalStore(postgres_url)
    store.remember(KEY, ApprovalOutcome.REJECTED_ALWAYS)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("UPDATE dsh_tools_approvals SET outcome = 'allowed-once'")
    with pytest.raises(ApprovalStoreError, match="unknown outcome 'allowed-once'"):
        store.recall(KEY)
    store.close()


@pytest.mark.parametrize("agent", ["agent-\x00", "agent-\udc80"])
def test_text_the_server_cannot_hold_fails_as_a_store_error(postgres_url: str, agent: str) -> None:
    store = PostgresApprovalStore(postgres_url)
    with pytest.raises(ApprovalStoreError, match="approval store postgresql://"):
        store.remember(ApprovalKey.for_tool(agent, "deploy"), ALLOWED)
    assert store.recall(KEY) is None  # the store still works
    store.close()


def test_the_store_reconnects_after_the_server_dropped_its_connections(postgres_url: str) -> None:
    store = PostgresApprovalStore(postgres_url)
    store.remember(KEY, ALLOWED)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(
            # This database's only: other test sessions may share the server.
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name"
            " = 'dsh-tools approvals' AND datname = current_database()"
        )
    # The dropped connection fails one operation (closed), never more.
    try:
        first = store.recall(KEY)
    except ApprovalStoreError:
        first = None
    assert first in (None, ALLOWED)
    assert store.recall(KEY) is ALLOWED
    store.close()


class TestPostgresStore(StoreContract):
    """The store contract (``tests/store_contract.py``) on PostgreSQL."""

    @pytest.fixture
    def store(self, postgres_url: str) -> Iterator[PostgresApprovalStore]:
        store = PostgresApprovalStore(postgres_url)
        yield store
        store.close()


def test_a_waiter_is_woken_by_the_notification_not_by_looking_again(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dsh_tools.approvals import TicketAnswer, TicketState
    from dsh_tools_plugins import approval_postgres
    from dsh_tools_plugins._stores import postgres_tickets as _postgres_tickets
    from store_contract import ticket

    looked = threading.Event()
    read = _postgres_tickets._get

    def get_and_tell(connection: Any, ticket_id: str) -> Any:
        found = read(connection, ticket_id)
        looked.set()  # the waiter listens, and saw the ticket pending
        return found

    monkeypatch.setattr(approval_postgres, "RECHECK_S", 3600.0)  # no look but the listener's
    waiting, answering = PostgresApprovalStore(postgres_url), PostgresApprovalStore(postgres_url)
    made = waiting.open_ticket(ticket())
    monkeypatch.setattr(_postgres_tickets, "_get", get_and_tell)
    seen: list[Any] = []
    waiter = threading.Thread(
        target=lambda: seen.append(waiting.wait_for_answer(made.id, 600)), daemon=True
    )
    waiter.start()
    assert looked.wait(60)
    answering.answer_ticket(made.id, TicketAnswer("allowed-once", "ana", "inbox"))
    # Without NOTIFY the waiter would sleep for its whole ten minutes.
    waiter.join(60)
    assert not waiter.is_alive()
    assert seen[0].state is TicketState.ANSWERED
    waiting.close()
    answering.close()
