"""The call journal in the call path, on every first-party store: a call of a tool that is
not read-only runs at most once per key; a repeat of a finished call is replayed, a key
reused for other arguments is refused, and a repeat of an attempt whose outcome is
unknown runs only when the tool (idempotent, reconcile) or a person settles it."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from dsh_tools import (
    ApprovalRequest,
    Ask,
    TicketAnswer,
    ToolExecutionInput,
    ToolRegistry,
    define_tool,
    hookimpl,
)
from dsh_tools.approvals import JournalEntry, JournalState, call_digest

AGENT = "coder"


def _registry(store: Any, **tool: Any) -> tuple[ToolRegistry, list[str]]:
    """A registry on ``store`` with a tool ``charge`` whose body counts its runs."""
    ran: list[str] = []

    def charge(args: Any, ctx: Any) -> dict[str, Any]:
        ran.append(ctx.idempotency_key)
        if args["cents"] < 0:
            raise ValueError("a negative charge")
        return {"charged": args["cents"]}

    registry = ToolRegistry(approval_store=store, journal_lease_s=0.2)
    parameters = {"cents": {"type": "integer", "required": True}}
    registry.register(
        define_tool(
            name="charge", description="Charge.", parameters=parameters, execute=charge, **tool
        )
    )
    return registry, ran


def _call(cents: int = 5, key: str | None = "order-1", call_id: str = "c1") -> ToolExecutionInput:
    return ToolExecutionInput(call_id, "charge", {"cents": cents}, agent=AGENT, idempotency_key=key)


def _code(result: Any) -> str | None:
    return None if not result.is_error else str(result.error.info.code)


def _attempt(store: Any, key: str, owner: str, lease_s: float, cents: int = 5) -> None:
    """An attempt of ``charge`` by ``owner``, started under ``key`` (call id ``c0``)."""
    digest = call_digest("charge", {"cents": cents})
    entry = JournalEntry(AGENT, key, "charge", digest, "c0", owner)
    assert store.begin_call(entry, lease_s).started


def _dead_attempt(store: Any, key: str, cents: int = 5) -> None:
    """An attempt of ``charge`` that started under ``key`` and whose owner died: its
    lease runs out and nobody renews it."""
    _attempt(store, key, "host-a:4242:dead", 0.05, cents)
    deadline = time.monotonic() + 10
    while store.get_call(AGENT, key).state is not JournalState.UNKNOWN:
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_a_repeat_of_a_finished_call_is_replayed_without_running(approval_store: Any) -> None:
    registry, ran = _registry(approval_store)
    first = registry.execute_sync(_call())
    again = registry.execute_sync(_call(call_id="c2"))
    assert ran == ["order-1"]  # the body saw the host's key, and ran once
    assert again.value == first.value == {"charged": 5}
    assert again.meta == {"journal": "replayed"}
    assert first.meta is None
    entry = approval_store.get_call(AGENT, "order-1")
    assert entry.state is JournalState.FINISHED
    assert entry.result["value"] == {"charged": 5}


def test_a_failure_is_recorded_and_replayed_too(approval_store: Any) -> None:
    registry, ran = _registry(approval_store)
    first = registry.execute_sync(_call(-1))
    again = registry.execute_sync(_call(-1, call_id="c2"))
    assert _code(first) == _code(again) == "TOOL_ERROR"
    assert again.error.message == first.error.message
    assert again.meta == {"journal": "replayed"}
    assert len(ran) == 1


def test_a_key_reused_for_other_arguments_is_refused(approval_store: Any) -> None:
    registry, ran = _registry(approval_store)
    registry.execute_sync(_call(5))
    other = registry.execute_sync(_call(7, call_id="c2"))
    assert _code(other) == "INVALID_ARGS"
    assert "idempotency key 'order-1'" in other.error.message
    assert len(ran) == 1


def test_an_unknown_attempt_does_not_run_again_blindly(approval_store: Any) -> None:
    registry, ran = _registry(approval_store)
    _dead_attempt(approval_store, "order-1")
    result = registry.execute_sync(_call())
    assert _code(result) == "OUTCOME_UNKNOWN"
    assert "host-a:4242:dead" in result.error.message  # where the attempt ran
    assert "may or may not have run" in result.error.message
    assert result.meta["journal"]["state"] == "unknown"
    assert ran == []
    assert approval_store.get_call(AGENT, "order-1").state is JournalState.UNKNOWN


def test_a_running_attempt_is_not_run_twice(approval_store: Any) -> None:
    registry, ran = _registry(approval_store)
    entry = JournalEntry(
        AGENT, "order-1", "charge", call_digest("charge", {"cents": 5}), "c0", "alive"
    )
    assert approval_store.begin_call(entry, 60.0).started
    result = registry.execute_sync(_call())
    assert _code(result) == "OUTCOME_UNKNOWN"
    assert "still running" in result.error.message
    assert ran == []


def test_an_idempotent_tool_runs_again_after_an_unknown_attempt(approval_store: Any) -> None:
    registry, ran = _registry(approval_store, metadata={"idempotent": True})
    _dead_attempt(approval_store, "order-1")
    result = registry.execute_sync(_call())
    assert result.value == {"charged": 5}
    assert ran == ["order-1"]
    entry = approval_store.get_call(AGENT, "order-1")
    assert (entry.state, entry.attempts) == (JournalState.FINISHED, 2)


@pytest.mark.parametrize("happened", [True, False])
def test_a_reconcile_step_settles_an_unknown_attempt(approval_store: Any, happened: bool) -> None:
    seen: list[tuple[int, str]] = []

    def reconcile(args: Any, entry: JournalEntry) -> object:
        seen.append((args["cents"], entry.owner))
        return {"charged": args["cents"], "found": True} if happened else None

    registry, ran = _registry(approval_store, reconcile=reconcile)
    _dead_attempt(approval_store, "order-1")
    result = registry.execute_sync(_call())
    assert seen == [(5, "host-a:4242:dead")]
    if happened:
        assert result.value == {"charged": 5, "found": True}
        assert result.meta == {"journal": "reconciled"}
        assert ran == []
    else:
        assert result.value == {"charged": 5}
        assert ran == ["order-1"]
    again = registry.execute_sync(_call(call_id="c9"))
    assert again.meta == {"journal": "replayed"}  # settled: the key holds its result now
    assert again.value == result.value


@pytest.mark.anyio
async def test_await_execute_journals_the_same_way(approval_store: Any) -> None:
    registry, ran = _registry(approval_store)
    first = await registry.execute(_call())
    again = await registry.execute(_call(call_id="c2"))
    assert again.value == first.value
    assert again.meta == {"journal": "replayed"}
    assert len(ran) == 1


class _Counting:
    """An approval store that counts the calls of its journal's methods."""

    JOURNAL = frozenset(
        {"begin_call", "retake_call", "renew_call", "finish_call", "get_call", "list_calls"}
    )

    def __init__(self, store: Any) -> None:
        self._store = store
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        if name not in self.JOURNAL:
            return found

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return found(*args, **kwargs)

        return counted


def test_read_only_tools_skip_the_journal(approval_store: Any) -> None:
    counting = _Counting(approval_store)
    registry, ran = _registry(counting, metadata={"read_only": True})
    for n in range(3):
        result = registry.execute_sync(_call(call_id=f"c{n}"))
        assert result.value == {"charged": 5}
    assert len(ran) == 3  # every call ran: nothing replayed
    assert counting.calls == []  # and the journal was never asked
    writer, _ = _registry(counting)
    writer.execute_sync(_call())
    assert "begin_call" in counting.calls
    assert "finish_call" in counting.calls


def test_the_body_s_key_is_the_call_id_without_a_host_key(tmp_path: Any) -> None:
    from dsh_tools_plugins.approval_store import SqliteApprovalStore

    store = SqliteApprovalStore(tmp_path / "a.sqlite3")
    registry, ran = _registry(store)
    registry.execute_sync(_call(key=None, call_id="call-7"))
    assert ran == ["call-7"]
    assert store.get_call(AGENT, "call-7").state is JournalState.FINISHED


def test_the_memory_store_journals_only_keyed_calls() -> None:
    from dsh_tools import MemoryApprovalStore

    store = MemoryApprovalStore()
    registry, _ran = _registry(store)
    for n in range(3):
        registry.execute_sync(_call(key=None, call_id=f"c{n}"))
    assert store.list_calls() == []  # memory does not grow per call
    registry.execute_sync(_call())
    assert [entry.key for entry in store.list_calls()] == ["order-1"]


def test_a_process_prunes_its_store_s_old_finished_entries_by_itself(
    approval_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dsh_tools._pipeline import scribe

    monkeypatch.setattr(scribe, "PRUNE_FIRST_S", 0.0)  # at once, not a minute in
    approval_store.journal_retention_s = 0.0  # as if every finished entry were old
    old = JournalEntry(AGENT, "order-0", "charge", call_digest("charge", {"cents": 1}), "c0", "o")
    assert approval_store.begin_call(old, 60.0).started
    assert approval_store.finish_call(AGENT, "order-0", "o", "charged long ago")
    _dead_attempt(approval_store, "order-died")
    registry, ran = _registry(approval_store)
    registry.execute_sync(_call(key="order-new"))  # this process's first journaled call
    deadline = time.monotonic() + 10.0
    while approval_store.get_call(AGENT, "order-0") is not None:
        assert time.monotonic() < deadline, "the old finished entry was never pruned"
        time.sleep(0.02)
    assert approval_store.get_call(AGENT, "order-died").state is JournalState.UNKNOWN
    # A repeat of a pruned key is a new call: it runs again (at most once per key only
    # within the retention).
    assert registry.execute_sync(_call(cents=1, key="order-0", call_id="c9")).meta is None
    assert ran == ["order-new", "order-0"]


# ------------------------------------------------------------- tickets and persons


class _AskAlways:
    @hookimpl
    def dsh_tools_pre_execute(self, execution: Any) -> Ask:
        return Ask("charges money")


def _asking(store: Any, **tool: Any) -> tuple[ToolRegistry, list[str]]:
    registry, ran = _registry(store, **tool)
    registry.approval = lambda request: "pending"
    registry.add_plugin(_AskAlways(), name="permissions")
    return registry, ran


def _approve(store: Any, result: Any) -> str:
    assert _code(result) == "APPROVAL_PENDING", result
    ticket_id: str = result.meta["approval"]["ticket"]
    store.answer_ticket(ticket_id, TicketAnswer("allowed-once", "ana", "cli"))
    return ticket_id


@pytest.fixture
def durable_store(approval_store: Any, store_kind: str) -> Any:
    """A store that journals every call (the memory store journals keyed calls only)."""
    if store_kind == "memory":
        pytest.skip("the memory store journals only calls with a host's key")
    return approval_store


def test_a_resumed_ticket_s_call_is_journaled_with_its_ticket(durable_store: Any) -> None:
    registry, ran = _asking(durable_store)
    ticket_id = _approve(durable_store, registry.execute_sync(_call(key=None)))
    result = registry.resume_sync(ticket_id)
    assert result.value == {"charged": 5}
    entry = durable_store.get_call(AGENT, "c1")
    assert (entry.state, entry.ticket_id) == (JournalState.FINISHED, ticket_id)
    again = registry.resume_sync(ticket_id)  # the same call: replayed, not run
    assert again.meta == {"journal": "replayed"}
    assert _code(registry.execute_sync(_call(key=None, call_id="c2"))) == "APPROVAL_PENDING"
    assert len(ran) == 1


def test_a_resumed_call_keeps_the_host_s_idempotency_key(approval_store: Any) -> None:
    registry, ran = _asking(approval_store)
    ticket_id = _approve(approval_store, registry.execute_sync(_call(key="order-9")))
    assert approval_store.get_ticket(ticket_id).idempotency_key == "order-9"
    assert registry.resume_sync(ticket_id).value == {"charged": 5}
    assert ran == ["order-9"]  # the body is handed the host's key, not the call id
    entry = approval_store.get_call(AGENT, "order-9")
    assert (entry.state, entry.ticket_id) == (JournalState.FINISHED, ticket_id)
    # The host repeats the call with its key after the resume: the recorded result.
    again = registry.execute_sync(_call(key="order-9", call_id="c2"))
    assert again.value == {"charged": 5}
    assert again.meta == {"journal": "replayed"}
    assert ran == ["order-9"]


def test_a_repeat_with_a_new_call_id_after_an_unknown_attempt_is_shown_to_the_person(
    durable_store: Any,
) -> None:
    registry, ran = _asking(durable_store)
    _dead_attempt(durable_store, "c0")
    # Without a person's answer the repeat does not run...
    plain, _ = _registry(durable_store)
    refused = plain.execute_sync(_call(key=None, call_id="c1"))
    assert _code(refused) == "OUTCOME_UNKNOWN"
    assert "(call c0)" in refused.error.message
    # ...and a person asked about it sees the earlier attempt on the ticket.
    pending = registry.execute_sync(_call(key=None, call_id="c2"))
    ticket_id = _approve(durable_store, pending)
    shown = durable_store.get_ticket(ticket_id).asked_by["earlier_attempt"]
    assert (shown["key"], shown["owner"]) == ("c0", "host-a:4242:dead")
    result = registry.resume_sync(ticket_id)
    assert result.value == {"charged": 5}
    assert ran == ["c2"]
    earlier = durable_store.get_call(AGENT, "c0")
    assert earlier.state is JournalState.FINISHED  # settled by the person's answer
    assert earlier.result["error"]["info"]["code"] == "OUTCOME_UNKNOWN"
    assert plain.execute_sync(_call(key=None, call_id="c3")).value == {"charged": 5}


def test_a_repeat_with_a_new_call_id_meets_an_attempt_killed_less_than_a_lease_ago(
    durable_store: Any,
) -> None:
    """A client repeats a dropped call at once, before the killed attempt's lease ran out:
    the attempt still looks running, and the repeat waits for it, then does not run it
    blindly."""
    registry, ran = _registry(durable_store)
    _attempt(durable_store, "c0", "host-a:4242:dead", 0.5)  # nobody renews it
    result = registry.execute_sync(_call(key=None, call_id="c1"))
    assert _code(result) == "OUTCOME_UNKNOWN", result
    assert "(call c0)" in result.error.message
    assert ran == []


def test_a_repeat_with_a_new_call_id_runs_once_the_earlier_attempt_finished(
    durable_store: Any,
) -> None:
    registry, ran = _registry(durable_store)
    _attempt(durable_store, "c0", "host-b:7:alive", 60.0)
    timer = threading.Timer(
        0.3, durable_store.finish_call, (AGENT, "c0", "host-b:7:alive", {"value": 5})
    )
    timer.start()
    try:
        result = registry.execute_sync(_call(key=None, call_id="c1"))
    finally:
        timer.join()
    assert result.value == {"charged": 5}  # a new call: it waited, then ran
    assert ran == ["c1"]


def test_a_repeat_with_a_new_call_id_does_not_outwait_a_live_attempt(
    durable_store: Any,
) -> None:
    registry, ran = _registry(durable_store)  # a lease of 0.2 s: it waits 1.2 s at most
    _attempt(durable_store, "c0", "host-b:7:alive", 60.0)  # its owner renews it
    result = registry.execute_sync(_call(key=None, call_id="c1"))
    assert _code(result) == "OUTCOME_UNKNOWN", result
    assert "still running" in result.error.message
    # Without a key a later call is a new call, not the earlier one's result.
    assert "Check whether it took effect" in result.error.message
    assert ran == []


def test_the_same_call_made_twice_at_once_runs_twice_one_after_the_other(
    durable_store: Any,
) -> None:
    """Two calls with the same arguments and no key are two calls: the later one waits
    for the older to finish, then runs."""
    registry, ran = _registry(durable_store)
    registry.add_plugin(_AskAlways(), name="permissions")
    registry.approval = lambda request: "allowed-once"
    calls = [_call(key=None, call_id=f"c{n}") for n in (1, 2)]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(registry.execute_sync, calls))
    assert [result.value for result in results] == [{"charged": 5}] * 2, results
    assert sorted(ran) == ["c1", "c2"]


def test_approval_service_requests_are_unchanged_for_journaled_calls(
    durable_store: Any,
) -> None:
    asked: list[ApprovalRequest] = []

    def service(request: ApprovalRequest) -> str:
        asked.append(request)
        return "allowed-once"

    registry, ran = _registry(durable_store)
    registry.approval = service
    registry.add_plugin(_AskAlways(), name="permissions")
    assert registry.execute_sync(_call(key=None)).value == {"charged": 5}
    assert len(asked) == len(ran) == 1
