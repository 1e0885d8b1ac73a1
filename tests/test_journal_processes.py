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
