"""Case 15: a thousand calls waiting for a person in one worker.

One registry, one event loop: ``WAITING`` calls of a tool that asks, each waiting for an
answer (``approval_timeout_ms``). Once all wait, tracemalloc says what each waiting call
holds (target <= 20 KB) and the thread count what they hold in threads (the store's one
watcher, not one each). Then a person in another thread answers them one every
``ANSWER_EVERY_S``, through another store object (another process's, for the SQLite and
PostgreSQL stores); the time from just before each answer to the start of its call's
body is reported as p50 and p99 (target p99 <= 100 ms), so it includes the answer's own
write, the wake, taking the ticket (another write) and the body's thread hop. Every call
must run once. The SQLite store looks at its file every ``poll_s`` (50 ms).
"""

from __future__ import annotations

import gc
import os
import random
import statistics
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from _harness import Row, Settings

WAITING = 1000
ANSWER_EVERY_S = 0.02


def _stores(kind: str, folder: Path) -> tuple[Any, Any] | None:
    """The waiting registry's store, and the person's; ``None`` when not available."""
    if kind == "memory":
        from dsh_tools import MemoryApprovalStore

        store = MemoryApprovalStore()
        return store, store
    if kind == "sqlite":
        from dsh_tools_plugins.approval_store import SqliteApprovalStore

        path = folder / "approvals.sqlite3"
        return SqliteApprovalStore(path), SqliteApprovalStore(path)
    url = os.environ.get("DSH_TOOLS_TEST_POSTGRES_URL")
    if not url:
        return None
    from dsh_tools_plugins.approval_postgres import PostgresApprovalStore

    waiting = PostgresApprovalStore(url, timeout_s=30, create_schema=True)
    waiting.check()
    return waiting, PostgresApprovalStore(url, timeout_s=30)


def _registry(store: Any, started: dict[str, float]) -> Any:
    from dsh_tools import Ask, ToolRegistry, define_tool, hookimpl

    class AskAll:
        @hookimpl
        def dsh_tools_pre_execute(self) -> Ask:
            return Ask("a person reviews every write")

    def write(args: Any, ctx: Any) -> str:
        started[args["path"]] = time.perf_counter()
        return "written"

    registry = ToolRegistry(
        approval=lambda request: "pending", approval_store=store, approval_timeout_ms=600_000
    )
    parameters = {"path": {"type": "string", "required": True}}
    registry.register(
        define_tool(name="write", description="Write.", parameters=parameters, execute=write)
    )
    registry.add_plugin(AskAll())
    return registry


def _person(store: Any, agent: str, count: int, answered: dict[str, float]) -> Callable[[], None]:
    """Answers ``agent``'s pending tickets once ``count`` wait, in random order, one every
    ``ANSWER_EVERY_S``; notes when each answer was sent."""
    from dsh_tools import TicketAnswer, TicketState

    def answer_all() -> None:
        while len(pending := store.list_tickets(agent=agent, state=TicketState.PENDING)) < count:
            time.sleep(0.05)
        random.shuffle(pending)
        for ticket in pending:
            answered[ticket.arguments["path"]] = time.perf_counter()
            store.answer_ticket(ticket.id, TicketAnswer("allowed-once", "ana", "bench"))  # type: ignore[arg-type]
            time.sleep(ANSWER_EVERY_S)

    return answer_all


async def _wait_and_answer(kind: str, stores: tuple[Any, Any], count: int) -> dict[str, Any]:
    import anyio

    from dsh_tools import ToolExecutionInput

    waiting, answering = stores
    agent = f"bench-{os.getpid()}-{time.time_ns()}"  # a database may hold earlier runs'
    started: dict[str, float] = {}
    answered: dict[str, float] = {}
    registry = _registry(waiting, started)
    results: list[Any] = []
    seen: dict[str, Any] = {}

    async def one(n: int) -> None:
        call = ToolExecutionInput(f"c{n}", "write", {"path": f"{kind}-{n}"}, agent=agent)
        results.append(await registry.execute(call))

    gc.collect()
    threads = threading.active_count()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    async with anyio.create_task_group() as group:
        for n in range(count):
            group.start_soon(one, n)
        while len(answering.list_tickets(agent=agent)) < count:
            await anyio.sleep(0.05)
        await anyio.sleep(0.5)  # every call is in its wait
        gc.collect()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        seen["threads"] = threading.active_count() - threads
        seen["bytes"] = sum(s.size_diff for s in after.compare_to(before, "filename")) / count
        del before, after
        answer_all = _person(answering, agent, count, answered)
        person = threading.Thread(target=answer_all, daemon=True)
        person.start()
    person.join()
    seen["ran"] = sum(not result.is_error for result in results)
    seen["latencies"] = [started[path] - answered[path] for path in answered if path in started]
    return seen


def _rows(kind: str, seen: dict[str, Any], count: int) -> list[Row]:
    latencies = sorted(seen["latencies"])
    p50 = statistics.median(latencies) * 1000
    p99 = latencies[max(0, int(len(latencies) * 0.99) - 1)] * 1000
    return [
        Row(
            "15",
            f"{kind}: waiting calls that ran once",
            seen["ran"],
            unit="calls",
            target=f"{count} of {count}",
            met=seen["ran"] == count == len(latencies),
        ),
        Row(
            "15",
            f"{kind}: memory per waiting call",
            seen["bytes"] / 1024,
            unit="KB",
            target="<= 20 KB",
            met=seen["bytes"] <= 20 * 1024,
            note=f"{seen['threads']} more threads while {count} calls waited",
        ),
        Row("15", f"{kind}: answer to body start, p50", p50, unit="ms"),
        Row(
            "15",
            f"{kind}: answer to body start, p99",
            p99,
            unit="ms",
            target="<= 100 ms",
            met=p99 <= 100,
            note=f"one answer every {ANSWER_EVERY_S * 1000:g} ms",
        ),
    ]


def run(settings: Settings) -> list[Row]:
    import anyio

    count = WAITING if not settings.quick else WAITING // 4
    rows: list[Row] = []
    # The SQLite file in memory when the machine has /dev/shm: each write's fsync on these
    # machines' disks (about 20 ms) would be measured, not the wait (as in case 11).
    memory = "/dev/shm" if Path("/dev/shm").is_dir() else None
    for kind in ("memory", "sqlite", "postgresql"):
        with TemporaryDirectory(dir=memory) as folder:
            stores = _stores(kind, Path(folder))
            if stores is None:
                rows.append(Row("15", kind, unit="", note="skipped: no PostgreSQL server"))
                continue
            seen = anyio.run(_wait_and_answer, kind, stores, count, backend="asyncio")
            rows += _rows(kind, seen, count)
    return rows
