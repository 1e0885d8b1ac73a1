"""TimeoutPolicy: per-tool-glob budgets for tools that declare no ``timeout_ms``."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator
from typing import Any

import anyio
import pytest

from dsh_tools._cancel import CancelSignal, CancelSource
from dsh_tools._context import ToolRunContext
from dsh_tools._define import define_tool
from dsh_tools._models import (
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolExecutionSuccess,
)
from dsh_tools._registry import ToolRegistry
from dsh_tools.errors import DefinitionError
from dsh_tools.hookspecs import Dispatch, hookimpl
from dsh_tools_plugins.timeouts import TimeoutPolicy

SLOW_S = 5.0  # a body that would take this long is always cut by a 30-50 ms budget


def sleeper(log: list[str], seconds: float = SLOW_S) -> Any:
    async def body(args: Any, ctx: ToolRunContext) -> str:
        log.append("started")
        try:
            await anyio.sleep(seconds)
        finally:
            log.append(f"stopped, signal cancelled={ctx.signal.cancelled}")
        return "finished"

    return body


def tool(name: str, body: Any, **options: Any) -> Any:
    return define_tool(name=name, description=name, parameters={}, execute=body, **options)


def failure(result: ToolExecutionResult) -> ToolExecutionFailure:
    assert isinstance(result, ToolExecutionFailure), result
    return result


@pytest.mark.anyio
async def test_a_glob_budget_stops_a_cooperative_body_and_reports_tool_timeout() -> None:
    log: list[str] = []
    registry = ToolRegistry()
    registry.register(tool("web_fetch", sleeper(log)))
    registry.add_plugin(TimeoutPolicy(per_tool={"web_*": 40}))

    started = time.perf_counter()
    result = failure(await registry.execute(ToolExecutionInput("c1", "web_fetch")))

    assert time.perf_counter() - started < 2
    assert result.code == "TOOL_TIMEOUT"
    assert result.error.message == 'tool "web_fetch" timed out after 40 ms'
    assert result.text == 'Error: tool "web_fetch" timed out after 40 ms'
    # The body was stopped through its signal and finished before execute() returned.
    assert log == ["started", "stopped, signal cancelled=True"]


@pytest.mark.anyio
async def test_a_body_within_its_budget_is_untouched() -> None:
    registry = ToolRegistry()
    registry.register(tool("quick", sleeper([], 0)))
    registry.add_plugin(TimeoutPolicy(default_ms=2000))

    result = await registry.execute(ToolExecutionInput("c1", "quick"))

    assert isinstance(result, ToolExecutionSuccess)
    assert result.value == "finished"


@pytest.mark.anyio
async def test_exact_names_beat_globs_and_default_covers_the_rest() -> None:
    policy = TimeoutPolicy(default_ms=30, per_tool={"web_*": 1000, "web_search": 50})
    assert policy.budget_ms("web_search") == 50
    assert policy.budget_ms("web_fetch") == 1000
    assert policy.budget_ms("read_file") == 30

    log: list[str] = []
    registry = ToolRegistry()
    registry.register(tool("read_file", sleeper(log)))
    registry.add_plugin(policy)
    result = failure(await registry.execute(ToolExecutionInput("c1", "read_file")))
    assert result.error.message == 'tool "read_file" timed out after 30 ms'


@pytest.mark.anyio
async def test_a_tool_with_its_own_timeout_keeps_it() -> None:
    registry = ToolRegistry()
    # The definition allows 2 s; the policy's 20 ms budget must not apply to it.
    registry.register(tool("own", sleeper([], 0.1), timeout_ms=2000))
    registry.add_plugin(TimeoutPolicy(default_ms=20))

    result = await registry.execute(ToolExecutionInput("c1", "own"))

    assert isinstance(result, ToolExecutionSuccess)


@pytest.mark.anyio
async def test_scoped_tools_are_looked_up_in_their_scope() -> None:
    registry = ToolRegistry()
    registry.register(tool("job", sleeper([])))
    agent = registry.scope("agent")
    agent.register(tool("job", sleeper([], 0.1), timeout_ms=2000))  # shadows, own timeout
    registry.add_plugin(TimeoutPolicy(default_ms=30))

    inner = await agent.execute(ToolExecutionInput("c1", "job"))
    outer = await registry.execute(ToolExecutionInput("c2", "job"))

    assert isinstance(inner, ToolExecutionSuccess)
    assert failure(outer).code == "TOOL_TIMEOUT"


def test_a_blocking_body_in_a_thread_times_out_at_the_deadline() -> None:
    # The thread sees its signal fire and stops on its own, after the call has returned.
    finished = threading.Event()

    def body(args: Any, ctx: ToolRunContext) -> str:
        deadline = time.monotonic() + SLOW_S
        while not ctx.signal.cancelled and time.monotonic() < deadline:
            time.sleep(0.002)
        finished.set()
        return "done"

    registry = ToolRegistry()
    registry.register(tool("crunch", body, blocking=True))
    registry.add_plugin(TimeoutPolicy(per_tool={"crunch": 30}))

    started = time.perf_counter()
    result = failure(registry.execute_sync(ToolExecutionInput("c1", "crunch")))

    assert time.perf_counter() - started < 2
    assert result.code == "TOOL_TIMEOUT"
    assert result.error.message == 'tool "crunch" timed out after 30 ms'
    assert finished.wait(SLOW_S)


@pytest.mark.anyio
async def test_the_callers_cancellation_stays_aborted() -> None:
    source = CancelSource()

    async def body(args: Any, ctx: ToolRunContext) -> str:
        source.cancel("user pressed stop")
        await anyio.sleep(SLOW_S)
        return "never"

    registry = ToolRegistry()
    registry.register(tool("stop", body))
    registry.add_plugin(TimeoutPolicy(default_ms=5000))

    result = await registry.execute(ToolExecutionInput("c1", "stop", signal=source.signal))

    assert failure(result).code == "ABORTED"


@pytest.mark.anyio
async def test_an_outer_wrappers_signal_still_reaches_the_body() -> None:
    seen: list[bool] = []

    async def body(args: Any, ctx: ToolRunContext) -> str:
        seen.append(True)
        return "ran"

    class CancelEverything:
        @hookimpl(wrapper=True)
        def dsh_tools_execute(
            self, execution: ToolExecution
        ) -> Generator[None, Dispatch, Dispatch]:
            dispatch = yield
            cancelled = CancelSource()
            cancelled.cancel("outer")

            async def run(signal: CancelSignal | None = None) -> ToolExecutionResult:
                return await dispatch(cancelled.signal)

            return run

    registry = ToolRegistry()
    registry.register(tool("t", body))
    registry.add_plugin(TimeoutPolicy(default_ms=5000))
    registry.add_plugin(CancelEverything())  # added later: the outer wrapper

    result = await registry.execute(ToolExecutionInput("c1", "t"))

    assert failure(result).code == "ABORTED_BEFORE_DISPATCH"
    assert seen == []


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), True, "10"])
def test_budgets_must_be_positive_finite_numbers(bad: Any) -> None:
    with pytest.raises(DefinitionError, match="positive finite number"):
        TimeoutPolicy(default_ms=bad)
    with pytest.raises(DefinitionError, match=r"per_tool\['x'\]"):
        TimeoutPolicy(per_tool={"x": bad})
