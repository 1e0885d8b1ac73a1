"""A PostgreSQL server that restarts (``pg_ctl restart -m fast``, on a cluster of the
tests' own) cuts every connection a store keeps; the store's next operations work
again, without a failed one first, and a journal entry begun before the restart is
finished after it."""

from __future__ import annotations

import uuid
from typing import Any

from dsh_tools import ApprovalOutcome
from dsh_tools.approvals import ApprovalKey, JournalEntry, JournalState, call_digest, journal_owner


def test_the_store_works_at_once_after_its_server_restarts(own_postgres: Any) -> None:
    from dsh_tools_plugins.approval_postgres import PostgresApprovalStore

    store = PostgresApprovalStore(own_postgres.url)
    agent = f"agent-{uuid.uuid4().hex[:8]}"
    key = ApprovalKey(agent, "charge", None)
    store.remember(key, ApprovalOutcome.ALLOWED_ALWAYS)  # a connection, kept idle
    owner = journal_owner()
    entry = JournalEntry(agent, "k-1", "charge", call_digest("charge", {}), "call-1", owner)
    assert store.begin_call(entry, lease_s=60.0).started

    own_postgres.restart()

    assert store.recall(key) is ApprovalOutcome.ALLOWED_ALWAYS  # no failed call first
    assert store.finish_call(agent, "k-1", owner, {"charged": True})
    kept = store.get_call(agent, "k-1")
    assert kept is not None
    assert kept.state is JournalState.FINISHED
    assert kept.result == {"charged": True}
    store.close()
