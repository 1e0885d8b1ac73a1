"""Where a DBOS workflow's tool call runs: in a sync workflow on the workflow's own
thread, as a bare step does (no hop to DBOS's background loop or to a worker thread);
the process's watcher still fires the signal of a cancelled workflow's call and
publishes its progress, from sync and ``async`` workflows alike."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOS, SetWorkflowID
from engine_worker import dbos_config

from dsh_tools import ToolRegistry, ToolRunContext, define_tool
from dsh_tools_plugins.engines._dbos_watch import AnyThreadSignal
from dsh_tools_plugins.engines.dbos import PROGRESS, call_tool, call_tool_async, serve_tools

SAW_SIGNAL = threading.Event()
STARTED = threading.Event()


def _where(args: Any, ctx: ToolRunContext) -> int:
    return threading.get_ident()


def _poll(args: Any, ctx: ToolRunContext) -> str:
    STARTED.set()
    give_up = time.monotonic() + 20
    while not ctx.signal.cancelled and time.monotonic() < give_up:
        time.sleep(0.01)
    if ctx.signal.cancelled:
        SAW_SIGNAL.set()
    return "done"


async def _waits(args: Any, ctx: ToolRunContext) -> str:
    ctx.report_progress(1, 2, "half way")
    STARTED.set()
    try:
        await asyncio.sleep(20)
    finally:
        if ctx.signal.cancelled:
            SAW_SIGNAL.set()
    return "done"


@DBOS.workflow(name="dsh_tools_test.thread_of_call")
def thread_of_call() -> list[int]:
    return [threading.get_ident(), int(call_tool("where", {})["value"])]


@DBOS.workflow(name="dsh_tools_test.polling_call")
def polling_call() -> dict[str, Any]:
    return call_tool("poll", {})


@DBOS.workflow(name="dsh_tools_test.waiting_call_async")
async def waiting_call_async() -> dict[str, Any]:
    return await call_tool_async("waits", {})


@pytest.fixture
def launched(tmp_path: Path) -> Iterator[None]:
    registry = ToolRegistry()
    for name, body in (("where", _where), ("poll", _poll), ("waits", _waits)):
        registry.register(define_tool(name=name, description=name, parameters={}, execute=body))
    DBOS.destroy()
    DBOS(config=dbos_config(f"sqlite:///{tmp_path / 'dbos.sqlite3'}", "dbos"))
    serve_tools(registry, watch_s=0.05)
    DBOS.launch()
    yield
    DBOS.destroy()


def test_a_plain_body_runs_on_the_sync_workflows_thread(launched: None) -> None:
    workflow_thread, body_thread = thread_of_call()

    assert body_thread == workflow_thread


def test_cancelling_a_sync_workflow_fires_a_plain_bodys_signal(launched: None) -> None:
    STARTED.clear()
    SAW_SIGNAL.clear()
    with SetWorkflowID("wf-polling"):
        DBOS.start_workflow(polling_call)
    assert STARTED.wait(10)

    DBOS.cancel_workflow("wf-polling")

    assert SAW_SIGNAL.wait(10)


def test_an_async_workflows_call_shows_progress_and_sees_its_cancellation(
    launched: None,
) -> None:
    STARTED.clear()
    SAW_SIGNAL.clear()
    with SetWorkflowID("wf-waiting"):
        DBOS.start_workflow(waiting_call_async)
    assert STARTED.wait(10)
    progress = DBOS.get_event("wf-waiting", PROGRESS, timeout_seconds=10)
    assert progress is not None
    assert progress["message"] == "half way"

    DBOS.cancel_workflow("wf-waiting")

    assert SAW_SIGNAL.wait(10)


def test_a_cancel_callback_may_wait_for_a_thread_that_adds_one_to_the_same_signal() -> None:
    signal = AnyThreadSignal()
    added = threading.Event()
    waited: list[bool] = []

    def add_another() -> None:
        signal.add_callback(lambda: None)
        added.set()

    def on_cancel() -> None:  # runs on the watcher's thread
        threading.Thread(target=add_another).start()
        waited.append(added.wait(5))

    signal.add_callback(on_cancel)
    signal.fire("the workflow was cancelled")

    assert waited == [True]


@pytest.mark.parametrize("watch_s", [0, -1, float("inf"), float("nan"), True, "1", None])
def test_serve_tools_refuses_a_watch_interval_that_is_not_a_positive_finite_number(
    watch_s: Any,
) -> None:
    with pytest.raises(ValueError, match=r"serve_tools: watch_s must be a positive finite"):
        serve_tools(ToolRegistry(), watch_s=watch_s)
