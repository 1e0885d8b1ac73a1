"""AuditLog under ``await registry.execute``: another process holding the log's lock
never stalls the event loop; the call waits for it in a worker thread, and its events
land whole once the lock is free."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from dsh_tools import ToolExecutionInput, ToolExecutionResult, ToolRegistry, define_tool, hookimpl
from dsh_tools_plugins.audit import AuditLog, read_audit_log

HOLDER = """
import fcntl, os, select, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
select.select([sys.stdin], [], [], 60)  # until the test lets go (a stalled loop cannot)
"""
"""Another writer: holds the log's ``flock`` until told to let go, or for 60 s."""


class Decided:
    """Notes each call that passed policy (and so is about to be recorded)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    @hookimpl
    def dsh_tools_pre_execute(self, execution: Any) -> None:
        self.calls.append(str(execution.call_id))


@pytest.mark.anyio
@pytest.mark.parametrize("blocked", ["the call event", "the result event"])
async def test_a_writer_holding_the_lock_does_not_stall_the_loop(
    tmp_path: Path, blocked: str
) -> None:
    path = tmp_path / "audit.jsonl"
    ran: list[str] = []
    body_runs, lock_taken = threading.Event(), threading.Event()

    def note(args: Any, ctx: Any) -> str:
        ran.append("hi")
        body_runs.set()
        if blocked == "the result event":  # another writer takes the lock meanwhile
            lock_taken.wait(60)
        return "hi"

    registry = ToolRegistry()
    registry.register(
        define_tool(name="note", description="Note.", parameters={}, execute=note, blocking=True)
    )
    registry.add_plugin(AuditLog(path))
    decided = Decided()
    registry.add_plugin(decided)
    holder: list[subprocess.Popen[bytes]] = []
    results: list[ToolExecutionResult] = []

    async def call() -> None:
        results.append(await registry.execute(ToolExecutionInput("c1", "note")))

    try:
        with anyio.fail_after(120):  # a generous bound, not a timing
            if blocked == "the call event":
                holder.append(await _locked(path))
            async with anyio.create_task_group() as group:
                group.start_soon(call)
                if blocked == "the result event":
                    await anyio.to_thread.run_sync(body_runs.wait)
                    holder.append(await _locked(path))
                    lock_taken.set()
                for _ in range(100):  # other tasks run meanwhile
                    await anyio.sleep(0)
                # The loop ran all of that while the lock was held, and the call waits.
                assert holder[0].poll() is None
                assert decided.calls == ["c1"]
                assert results == []
                assert ran == ([] if blocked == "the call event" else ["hi"])
                await anyio.to_thread.run_sync(holder[0].communicate, b"go\n")
    finally:
        for process in holder:
            if process.poll() is None:
                process.kill()
            process.wait()
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    stream.close()
    assert [result.text for result in results] == ["hi"]
    assert ran == ["hi"]
    events = [(event.event, event.call_id) for event in read_audit_log(path, strict=True)]
    assert events == [("tool/call", "c1"), ("tool/result", "c1")]


async def _locked(path: Path) -> subprocess.Popen[bytes]:
    """Another process, holding the log's lock."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, f"{path}.lock"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert process.stdout is not None
    assert await anyio.to_thread.run_sync(process.stdout.readline) == b"locked\n"
    return process
