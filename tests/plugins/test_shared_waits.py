"""Waiting for a shared permit in one process: no event loop is ever blocked by the store
(even a locked one), waiting calls hold no thread each, a call that leaves the line
frees its place, and a store that cannot be used fails the call closed."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh_tools import ToolExecutionInput, ToolRegistry, define_tool
from dsh_tools.errors import DefinitionError
from dsh_tools_plugins.approval_store import SqliteApprovalStore
from dsh_tools_plugins.limits import CallBudget, CallBudgets, ConcurrencyLimit, SharedLimits

pytestmark = pytest.mark.anyio


class Gate:
    """A body that records how many bodies run at once and waits until opened."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.lock = threading.Lock()
        self.inside = 0
        self.most = 0
        self.ran = 0

    def body(self, args: Any, ctx: Any) -> str:
        with self.lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
        self.opened.wait(60)
        with self.lock:
            self.inside -= 1
            self.ran += 1
        return "done"


def registry_with(*plugins: object, body: Any, timeout_ms: float | None = None) -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="work", description="Work.", parameters={}, execute=body, timeout_ms=timeout_ms
        )
    )
    for plugin in plugins:
        registry.add_plugin(plugin)
    return registry


def sqlite_limits(tmp_path: Path, timeout_s: float = 30) -> SharedLimits:
    return SharedLimits(SqliteApprovalStore(tmp_path / "limits.sqlite3", timeout_s=timeout_s))


async def test_waiting_calls_hold_no_thread_each_and_a_locked_store_never_stalls_the_loop(
    tmp_path: Path,
) -> None:
    shared = sqlite_limits(tmp_path, timeout_s=3)
    gate = Gate()
    registry = registry_with(ConcurrencyLimit(overall=1, store=shared), body=gate.body)
    holder = threading.Thread(target=registry.execute_sync, args=(ToolExecutionInput("h", "work"),))
    holder.start()
    while gate.inside < 1:
        await anyio.sleep(0.001)
    threads = threading.active_count()
    ticks = 0
    # Another process holds the file's write lock: the store's work waits for it, the
    # loop does not (a call that asked the store itself would stall it, then fail).
    locker = sqlite3.connect(tmp_path / "limits.sqlite3", isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    with anyio.fail_after(120):
        async with anyio.create_task_group() as group:
            for n in range(20):
                group.start_soon(registry.execute, ToolExecutionInput(f"w{n}", "work"))
            [pool] = registry_pools(registry)
            while pool.waiting < 20:
                await anyio.sleep(0.001)
            for _ in range(20):
                await anyio.sleep(0.01)
                ticks += 1
            assert threading.active_count() <= threads + 1  # the store's one keeper
            locker.execute("ROLLBACK")
            locker.close()
            gate.opened.set()
    holder.join()
    assert ticks == 20
    assert (gate.ran, gate.most) == (21, 1)


def registry_pools(registry: ToolRegistry) -> list[Any]:
    [limit] = [p for p in registry.plugin_manager.get_plugins() if isinstance(p, ConcurrencyLimit)]
    return list(limit.pools("work", None))


async def test_a_call_out_of_time_in_the_line_leaves_it_and_holds_nothing(tmp_path: Path) -> None:
    shared = sqlite_limits(tmp_path)
    gate = Gate()
    registry = registry_with(
        ConcurrencyLimit(overall=1, store=shared), body=gate.body, timeout_ms=200
    )
    await anyio.to_thread.run_sync(lambda: None)  # the thread pool is warm
    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(registry.execute, ToolExecutionInput("h", "work"))
            while gate.inside < 1:
                await anyio.sleep(0.001)
            late = await registry.execute(ToolExecutionInput("late", "work"))
            gate.opened.set()
    assert late.code == "TOOL_TIMEOUT"
    assert "waiting for a concurrency slot" in late.text

    def rows() -> tuple[int, int]:
        with sqlite3.connect(tmp_path / "limits.sqlite3") as file:
            (left,) = file.execute("SELECT count(*) FROM permit_waiters").fetchone()
            (held,) = file.execute("SELECT count(*) FROM permits").fetchone()
        file.close()
        return left, held

    with anyio.fail_after(30):  # the store's thread gives both back in a moment
        while rows() != (0, 0):
            await anyio.sleep(0.01)


def test_a_store_that_cannot_be_used_fails_the_call_closed(tmp_path: Path) -> None:
    broken = tmp_path / "not-a-database.sqlite3"
    broken.write_text("this is not a SQLite file\n" * 100)
    shared = SharedLimits(SqliteApprovalStore(broken))
    ran: list[str] = []
    for plugin in (ConcurrencyLimit(overall=2, store=shared), CallBudget(5, store=shared)):
        registry = registry_with(plugin, body=lambda args, ctx: ran.append("ran") or "done")
        result = registry.execute_sync(ToolExecutionInput("c", "work"))
        assert result.code == "POLICY_ERROR"
        assert "not-a-database.sqlite3" in result.text
        result = anyio.run(registry.execute, ToolExecutionInput("c", "work"))
        assert result.code == "POLICY_ERROR"
    assert ran == []


async def test_a_shared_budget_denies_on_a_loop_and_a_dry_run_never_counts(
    tmp_path: Path,
) -> None:
    shared = sqlite_limits(tmp_path)
    budget = CallBudget(2, "work", store=shared, name="two")
    registry = registry_with(budget, body=lambda args, ctx: "done")
    other = registry_with(CallBudget(2, "work", store=shared, name="two"), body=lambda a, c: "")
    for _ in range(3):
        assert (await registry.explain_async(ToolExecutionInput("x", "work"))).outcome == "run"
    results = [await registry.execute(ToolExecutionInput(f"c{n}", "work")) for n in range(2)]
    assert [result.code for result in results] == [None, None]
    denied = await other.execute(ToolExecutionInput("c3", "work"))  # another registry, same rows
    assert denied.code == "DENIED"
    assert "limit of 2 work calls reached" in denied.text
    assert budget.spent(None) == 2


def test_only_a_shared_limits_object_is_a_store(tmp_path: Path) -> None:
    store = SqliteApprovalStore(tmp_path / "limits.sqlite3")
    with pytest.raises(DefinitionError, match="store must be a SharedLimits"):
        ConcurrencyLimit(overall=1, store=store)  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match="lease_s must be a positive finite number"):
        SharedLimits(store, lease_s=0)
    mixed = [CallBudget(1, store=SharedLimits(store)), CallBudget(1)]
    with pytest.raises(DefinitionError, match="one store"):
        CallBudgets(mixed)


FORKED = """
import os, sys, anyio
from dsh_tools_plugins.approval_store import SqliteApprovalStore
from dsh_tools_plugins.limits import SharedLimits

shared = SharedLimits(SqliteApprovalStore(sys.argv[1]), lease_s=1)
pool = shared.permits("overall", 2)
assert anyio.run(pool.acquire)  # the parent's keeper thread runs, and holds a permit
child = os.fork()
if child == 0:
    # The child has no keeper thread of the parent's, and none of its permits: it takes
    # the other permit through a keeper of its own.
    ok = anyio.run(pool.acquire)
    os._exit(0 if ok and pool.in_use == 1 else 3)
_, status = os.waitpid(child, 0)
print(os.waitstatus_to_exitcode(status), pool.in_use)
"""


def test_a_forked_child_keeps_no_state_of_its_parents(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", FORKED, str(tmp_path / "limits.sqlite3")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "1"]


def test_the_first_in_the_stores_line_is_served_whatever_order_it_joined_in(
    tmp_path: Path,
) -> None:
    # A call waiting on its own thread takes its place in the store's line, then joins
    # this process's line: two such calls may join in the other order. The one ahead in
    # the store's line must still get the permit when it comes back (it waited forever).
    from dsh_tools_plugins._limits.keeper import SharedWaiter

    limits = sqlite_limits(tmp_path)
    permits = limits.permits("overall", 1)
    assert permits.try_acquire()
    woken, then = threading.Event(), threading.Event()
    first, second = SharedWaiter(woken.set, "overall", 1), SharedWaiter(then.set, "overall", 1)
    for waiter in (first, second):
        assert not permits._took(waiter, queue=True)  # a place in the store's line
    assert first.seq is not None
    assert second.seq is not None
    assert first.seq < second.seq
    limits.keeper.wait(second)
    limits.keeper.wait(first)
    permits.release()
    assert woken.wait(10), "the first in the store's line was never served"
    assert first.granted
    assert not second.granted
    permits.release()
    assert then.wait(10)
    assert second.granted
    permits.release()
