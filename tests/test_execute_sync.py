"""``execute_sync`` has no hidden cliff: sync stages and sync-safe wrappers run without
an event loop, and a wrapper that needs one fails closed, naming it.

Found in the first version: any execute wrapper (a retry, a metrics wrapper, a timeout)
made ``execute_sync`` start an event loop per call, about fifty times the cost of the
call itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator
from typing import Any

import anyio
import pytest
import trio

from dsh_tools._cancel import CancelSignal
from dsh_tools._context import ToolRunContext
from dsh_tools._define import define_tool
from dsh_tools._models import (
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionInput,
    ToolExecutionResult,
)
from dsh_tools._registry import ToolRegistry
from dsh_tools.errors import ErrorCode, ToolError
from dsh_tools.hookspecs import Dispatch, hookimpl
from dsh_tools_plugins.retry import RetryPolicy
from dsh_tools_plugins.timeouts import TimeoutPolicy


def running_loop() -> str:
    """``none``, or the library whose loop runs in this thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return "trio" if trio.lowlevel.in_trio_run() else "none"
    return "asyncio"


@pytest.fixture
def no_loop_may_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make starting an event loop fail: anyio.run is how the pipeline would start one."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an event loop was started")

    monkeypatch.setattr(anyio, "run", refuse)


class Stages:
    """Sync implementations of the four decision and observer stages, each noting
    whether an event loop runs while it does."""

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    @hookimpl
    def dsh_tools_pre_execute(self, execution: ToolExecution) -> None:
        self.seen.append(f"pre {running_loop()}")

    @hookimpl
    def dsh_tools_guard(self, execution: ToolExecution) -> None:
        self.seen.append(f"guard {running_loop()}")

    @hookimpl
    def dsh_tools_post_execute(self, execution: ToolExecution) -> None:
        self.seen.append(f"post {running_loop()}")

    @hookimpl
    def dsh_tools_result(self, execution: ToolExecution) -> None:
        self.seen.append(f"result {running_loop()}")


class Metrics:
    """A pass-through wrapper that times the inner dispatch."""

    def __init__(self) -> None:
        self.timings: list[float] = []

    @hookimpl(wrapper=True)
    def dsh_tools_execute(self, execution: ToolExecution) -> Generator[None, Dispatch, Dispatch]:
        dispatch = yield

        async def timed(signal: CancelSignal | None = None) -> ToolExecutionResult:
            started = time.perf_counter()
            try:
                return await dispatch(signal)
            finally:
                self.timings.append(time.perf_counter() - started)

        return timed


def flaky(seen: list[str]) -> Callable[[Any, ToolRunContext], str]:
    """A body that fails with a retryable code once, then succeeds."""

    def body(args: Any, ctx: ToolRunContext) -> str:
        seen.append(f"body {running_loop()}")
        if seen.count(f"body {running_loop()}") == 1:
            raise ToolError("busy", code=ErrorCode.TRANSIENT)
        return "done"

    return body


@pytest.mark.usefixtures("no_loop_may_start")
def test_sync_stages_and_first_party_wrappers_run_without_an_event_loop() -> None:
    seen: list[str] = []
    metrics = Metrics()
    registry = ToolRegistry(default_timeout_ms=5_000)
    registry.register(
        define_tool(
            name="fetch",
            description="Fetch.",
            parameters={},
            execute=flaky(seen),
            metadata={"idempotent": True},
        )
    )
    for plugin in (Stages(seen), metrics, RetryPolicy(backoff_ms=20), TimeoutPolicy(5_000)):
        registry.add_plugin(plugin)

    started = time.perf_counter()
    result = registry.execute_sync(ToolExecutionInput("c1", "fetch"))

    assert result.value == "done"  # type: ignore[union-attr]
    assert time.perf_counter() - started >= 0.02  # the backoff waited, blocking the thread
    # The deadlines ran the def body in a worker thread; nothing ran on an event loop.
    assert seen == [
        "pre none",
        "guard none",
        "body none",
        "body none",
        "post none",
        "result none",
    ]
    assert len(metrics.timings) == 2  # one per attempt: the retry is the outermost wrapper


class AwaitsALoop:
    """A wrapper whose dispatch awaits an event loop's own primitive first."""

    def __init__(self, wait: Callable[[], Any]) -> None:
        self.wait = wait

    @hookimpl(wrapper=True)
    def dsh_tools_execute(self, execution: ToolExecution) -> Generator[None, Dispatch, Dispatch]:
        dispatch = yield

        async def waiting(signal: CancelSignal | None = None) -> ToolExecutionResult:
            await self.wait()
            return await dispatch(signal)

        return waiting


WAITS: dict[str, Callable[[], Any]] = {
    "anyio.sleep": lambda: anyio.sleep(0.01),
    "anyio.Event().wait": lambda: anyio.Event().wait(),
    "asyncio.sleep(0), which yields": lambda: asyncio.sleep(0),
    "asyncio.sleep": lambda: asyncio.sleep(0.01),
    "trio.sleep": lambda: trio.sleep(0.01),
}


@pytest.mark.usefixtures("no_loop_may_start")
@pytest.mark.parametrize("wait", list(WAITS))
def test_a_wrapper_that_awaits_an_event_loop_fails_closed_and_says_what_to_do(wait: str) -> None:
    ran: list[str] = []
    seen: list[str] = []
    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="t", description="t", parameters={}, execute=lambda a, c: ran.append("body")
        )
    )
    registry.add_plugin(Stages(seen))
    registry.add_plugin(AwaitsALoop(WAITS[wait]), name="loop-waiter")

    result = registry.execute_sync(ToolExecutionInput("c1", "t"))

    assert isinstance(result, ToolExecutionFailure)
    assert result.code == "POLICY_ERROR"
    assert "execute wrapper plugin 'loop-waiter' awaited an event loop" in result.error.message
    assert "use `await registry.execute(call)`" in result.error.message
    assert ran == []
    assert seen == ["pre none", "guard none", "result none"]  # the final path


@pytest.mark.anyio
async def test_such_a_wrapper_runs_under_await_execute() -> None:
    registry = ToolRegistry()
    registry.register(define_tool(name="t", description="t", parameters={}, execute=lambda a, c: 1))
    registry.add_plugin(AwaitsALoop(lambda: anyio.sleep(0.01)))
    result = await registry.execute(ToolExecutionInput("c1", "t"))
    assert result.value == 1  # type: ignore[union-attr]


def test_an_async_def_stage_runs_the_call_on_one_event_loop() -> None:
    seen: list[str] = []

    class AsyncPolicy:
        @hookimpl
        async def dsh_tools_pre_execute(self) -> None:
            seen.append(f"pre {running_loop()}")

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="t",
            description="t",
            parameters={},
            execute=lambda a, c: seen.append(f"body {running_loop()}"),
        )
    )
    registry.add_plugin(AsyncPolicy())
    registry.add_plugin(Metrics())
    registry.execute_sync(ToolExecutionInput("c1", "t"))
    assert seen == ["pre asyncio", "body asyncio"]
