"""The call journal across processes, on one SQLite file and on one PostgreSQL database:
a worker that starts a call and is killed (SIGKILL) leaves an entry that turns unknown
when its lease runs out, and exactly one of the survivors retakes it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dsh_tools.approvals import JournalEntry, JournalState, call_digest
from dsh_tools_plugins.approval_store import open_approval_store

WORKER = """
import sys, time
from dsh_tools.approvals import JournalEntry, call_digest
from dsh_tools_plugins.approval_store import open_approval_store

database, key = sys.argv[1:]
store = open_approval_store(database, timeout_s=60)
entry = JournalEntry("coder", key, "write", call_digest("write", {"path": "a"}), "c1", "worker")
assert store.begin_call(entry, 2.0).started
print("started", flush=True)
while True:  # the running call renews its lease until it is killed
    store.renew_call("coder", key, "worker", 2.0)
    time.sleep(0.2)
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the processes keep their journal: a SQLite file, or a PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "approvals.sqlite3")
    return str(request.getfixturevalue("postgres_url"))


def test_a_killed_worker_s_call_turns_unknown_and_is_retaken_once(
    database: str, request: pytest.FixtureRequest
) -> None:
    key = f"k-{request.node.callspec.id}-{time.time_ns()}"
    with subprocess.Popen(
        [sys.executable, "-c", WORKER, database, key], stdout=subprocess.PIPE, text=True
    ) as worker:
        try:
            assert worker.stdout is not None
            assert worker.stdout.readline().strip() == "started"
            store = open_approval_store(database, timeout_s=60)
            time.sleep(2.5)  # longer than one lease: the worker kept renewing it
            assert store.get_call("coder", key).state is JournalState.STARTED
        finally:
            worker.send_signal(signal.SIGKILL)
            worker.wait()
    deadline = time.time() + 60
    while store.get_call("coder", key).state is not JournalState.UNKNOWN:
        assert time.time() < deadline, "the dead worker's entry never turned unknown"
        time.sleep(0.1)
    repeat = JournalEntry("coder", key, "write", call_digest("write", {"path": "a"}), "c2", "x")
    assert not store.begin_call(repeat, 60.0).started  # a repeat never starts it blindly
    with ThreadPoolExecutor(4) as pool:
        owners = [f"survivor-{n}" for n in range(4)]
        retaken = [
            found
            for found in pool.map(
                lambda owner: store.retake_call("coder", key, owner, 60.0), owners
            )
            if found is not None
        ]
    assert len(retaken) == 1
    assert retaken[0].attempts == 2


CALLER = """
import json, sys, time
from dsh_tools import Ask, ToolExecutionInput, ToolRegistry, define_tool, hookimpl
from dsh_tools_plugins.approval_store import open_approval_store

database, effects, mode, idempotent = sys.argv[1:]


def charge(args, ctx):
    with open(effects, "a") as file:
        file.write(ctx.idempotency_key + "\\n")
    print("running", flush=True)
    if mode == "hang":
        time.sleep(600)  # killed here, mid-body
    return {"charged": args["cents"]}


class AskAlways:
    @hookimpl
    def dsh_tools_pre_execute(self, execution):
        return Ask("charges money")


store = open_approval_store(database, timeout_s=60)
registry = ToolRegistry(
    approval=lambda request: "pending",
    approval_store=store,
    approval_timeout_ms=60_000,  # the call waits for the person's answer
    journal_lease_s=1.0,
)
metadata = {"idempotent": True} if idempotent == "yes" else {}
registry.register(define_tool(
    name="charge", description="Charge.", parameters={"cents": {"type": "integer"}},
    execute=charge, metadata=metadata,
))
if idempotent != "yes":
    registry.add_plugin(AskAlways(), name="permissions")
call = ToolExecutionInput("c1", "charge", {"cents": 5}, agent="coder", idempotency_key="order-1")
result = registry.execute_sync(call)
code = result.error.info.code if result.is_error else None
print(json.dumps({"code": code}), flush=True)
"""


def _caller(database: str, effects: Path, mode: str, idempotent: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CALLER, database, str(effects), mode, idempotent],
        stdout=subprocess.PIPE,
        text=True,
    )


def _approve_when_asked(database: str) -> str:
    """The person: answers the first pending ticket, from this process."""
    from dsh_tools.approvals import TicketAnswer, TicketState

    store = open_approval_store(database, timeout_s=60)
    deadline = time.time() + 60
    while not (pending := store.list_tickets(state=TicketState.PENDING)):
        assert time.time() < deadline, "the worker never asked"
        time.sleep(0.05)
    ticket = pending[0]
    store.answer_ticket(ticket.id, TicketAnswer("allowed-once", "ana", "cli"))
    return ticket.id


@pytest.mark.parametrize("idempotent", ["no", "yes"])
def test_a_worker_killed_mid_body_leaves_an_outcome_a_repeat_does_not_run_blindly(
    database: str, tmp_path: Path, idempotent: str
) -> None:
    import json

    effects = tmp_path / "effects.txt"
    with _caller(database, effects, "hang", idempotent) as worker:
        try:
            ticket_id = _approve_when_asked(database) if idempotent == "no" else None
            assert worker.stdout is not None
            assert worker.stdout.readline().strip() == "running"
        finally:
            worker.send_signal(signal.SIGKILL)
            worker.wait()
    store = open_approval_store(database, timeout_s=60)
    entry = store.get_call("coder", "order-1")
    assert entry.ticket_id == ticket_id  # the approval was spent with a record of it
    deadline = time.time() + 60
    while store.get_call("coder", "order-1").state is not JournalState.UNKNOWN:
        assert time.time() < deadline, "the dead worker's entry never turned unknown"
        time.sleep(0.1)
    repeat = subprocess.run(
        [sys.executable, "-c", CALLER, database, str(effects), "finish", idempotent],
        capture_output=True,
        text=True,
        timeout=120,
    )
    outcome = json.loads(repeat.stdout.splitlines()[-1])
    if idempotent == "no":
        assert outcome == {"code": "OUTCOME_UNKNOWN"}
        assert effects.read_text().splitlines() == ["order-1"]  # it ran once in total
        assert store.list_tickets(agent="coder")[-1].id == ticket_id  # nobody asked again
    else:
        assert outcome == {"code": None}
        assert effects.read_text().splitlines() == ["order-1", "order-1"]
        assert store.get_call("coder", "order-1").state is JournalState.FINISHED
