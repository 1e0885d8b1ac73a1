"""ConcurrencyLimit and CallBudget: caps on calls in flight and on calls made."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from dsh_tools._cancel import CancelSource
from dsh_tools._context import ToolRunContext
from dsh_tools._define import define_tool
from dsh_tools._models import ToolExecutionFailure, ToolExecutionInput, ToolExecutionResult
from dsh_tools._permits import Permits, Retired
from dsh_tools._registry import ToolRegistry
from dsh_tools.errors import DefinitionError, ErrorCode
from dsh_tools.testing import CallRecorder
from dsh_tools_plugins.limits import CallBudget, ConcurrencyLimit

CAP = 8


class Meter:
    """What the bodies saw: calls in flight (most at once) and the order they started."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most = 0
        self.started: list[int] = []

    def enter(self, index: int) -> None:
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            self.started.append(index)

    def leave(self) -> None:
        with self.lock:
            self.in_flight -= 1


def until(condition: Callable[[], bool]) -> None:
    """Spin (yielding the core) until ``condition`` holds; a generous bound, not a timing."""
    give_up = time.monotonic() + 120
    while not condition():
        assert time.monotonic() < give_up, "the condition never held"
        time.sleep(0.0002)


def capped_registry(
    body: Any, cap: int = CAP, timeout_ms: float | None = None
) -> tuple[ToolRegistry, Permits]:
    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="work",
            description="work",
            parameters={"i": {"type": "integer"}},
            execute=body,
            timeout_ms=timeout_ms,
        )
    )
    limit = ConcurrencyLimit(per_tool=cap)
    registry.add_plugin(limit)
    [pool] = limit.pools("work", None)
    return registry, pool


def call(index: int, source: CancelSource | None = None) -> ToolExecutionInput:
    return ToolExecutionInput(
        f"c{index}", "work", {"i": index}, signal=None if source is None else source.signal
    )


def check_round(
    meter: Meter, order: list[int], cancelled: set[int], results: dict[int, Any]
) -> None:
    """FIFO among the waiters that stayed: a waiter starts only once every live waiter
    queued before it was granted (up to CAP of them may enter their bodies in any order)."""
    live = [index for index in order if index not in cancelled]
    rank = {index: position for position, index in enumerate(live)}
    waiters_started = [index for index in meter.started if index in rank]
    assert sorted(waiters_started) == sorted(live)
    assert all(rank[index] < position + CAP for position, index in enumerate(waiters_started))
    for index in cancelled:
        failure = results[index]
        assert isinstance(failure, ToolExecutionFailure)
        assert failure.error.info.code == ErrorCode.ABORTED_BEFORE_DISPATCH


def test_ten_thousand_async_calls_never_exceed_the_cap_keep_fifo_and_leak_nothing() -> None:
    meter = Meter()
    gate: list[anyio.Event] = []

    async def body(args: dict[str, int], ctx: ToolRunContext) -> str:
        meter.enter(args["i"])
        try:
            await gate[0].wait()
        finally:
            meter.leave()
        return "done"

    registry, pool = capped_registry(body)
    rng = random.Random(26)

    async def one_round(first: int, waiters: int) -> None:
        gate[:] = [anyio.Event()]
        results: dict[int, ToolExecutionResult] = {}
        sources: dict[int, CancelSource] = {}

        async def run(index: int) -> None:
            results[index] = await registry.execute(call(index, sources.get(index)))

        async with anyio.create_task_group() as group:
            for index in range(first, first + CAP):
                group.start_soon(run, index)
            while meter.in_flight < CAP:
                await anyio.sleep(0)
            order = list(range(first + CAP, first + CAP + waiters))
            for index in order:
                sources[index] = CancelSource()
                group.start_soon(run, index)
                while pool.waiting < index - first - CAP + 1:
                    await anyio.sleep(0)
            cancelled = {index for index in order if rng.random() < 0.3}
            for index in cancelled:
                sources[index].cancel("gone")
            gate[0].set()
        check_round(meter, order, cancelled, results)
        assert pool.in_use == 0

    async def main() -> None:
        for first in range(0, 10_000, 1_000):
            await one_round(first, 1_000 - CAP)
        # No permit leaked: the next CAP calls all start at once, one more waits.
        gate[:] = [anyio.Event()]
        async with anyio.create_task_group() as group:
            for index in range(CAP + 1):
                group.start_soon(registry.execute, call(20_000 + index))
            while pool.waiting < 1:
                await anyio.sleep(0)
            assert meter.in_flight == CAP
            gate[0].set()

    anyio.run(main)
    assert meter.most == CAP


def test_ten_thousand_sync_calls_in_threads_never_exceed_the_cap_keep_fifo_and_leak_nothing() -> (
    None
):
    meter = Meter()
    gate = threading.Event()

    def body(args: dict[str, int], ctx: ToolRunContext) -> str:
        meter.enter(args["i"])
        try:
            gate.wait()
        finally:
            meter.leave()
        return "done"

    registry, pool = capped_registry(body)
    rng = random.Random(26)

    def one_round(first: int, waiters: int) -> None:
        gate.clear()
        results: dict[int, ToolExecutionResult] = {}
        sources: dict[int, CancelSource] = {}

        def run(index: int) -> None:
            results[index] = registry.execute_sync(call(index, sources.get(index)))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(first, first + CAP)]
        for thread in threads:
            thread.start()
        until(lambda: meter.in_flight == CAP)
        order = list(range(first + CAP, first + CAP + waiters))
        for count, index in enumerate(order, 1):
            sources[index] = CancelSource()
            threads.append(threading.Thread(target=run, args=(index,)))
            threads[-1].start()
            until(lambda count=count: pool.waiting == count)
        cancelled = {index for index in order if rng.random() < 0.3}
        for index in cancelled:
            sources[index].cancel("gone")
        gate.set()
        for thread in threads:
            thread.join()
        check_round(meter, order, cancelled, results)
        assert pool.in_use == 0

    for first in range(0, 10_000, 100):
        one_round(first, 100 - CAP)
    gate.clear()
    extra = [
        threading.Thread(target=registry.execute_sync, args=(call(20_000 + i),))
        for i in range(CAP + 1)
    ]
    for thread in extra:
        thread.start()
    until(lambda: pool.waiting == 1)
    assert meter.in_flight == CAP
    gate.set()
    for thread in extra:
        thread.join()
    assert meter.most == CAP


def test_a_wait_is_in_the_decision_record_and_counts_against_the_timeout() -> None:
    gate = threading.Event()
    recorder = CallRecorder()
    registry = ToolRegistry(tracer=recorder)
    registry.register(
        define_tool(
            name="work",
            description="work",
            parameters={},
            execute=lambda args, ctx: gate.wait() and "done",
        )
    )
    limit = ConcurrencyLimit(per_tool=1)
    registry.add_plugin(limit)
    [pool] = limit.pools("work", None)
    holder = threading.Thread(target=registry.execute_sync, args=(ToolExecutionInput("h", "work"),))
    holder.start()
    until(lambda: pool.in_use == 1)
    source = CancelSource()
    timed = registry.execute_sync(
        ToolExecutionInput("t", "work", signal=source.signal.with_timeout(1))
    )
    gate.set()
    holder.join()

    assert isinstance(timed, ToolExecutionFailure)
    assert timed.error.info.code == ErrorCode.TOOL_TIMEOUT
    assert "waiting for a concurrency slot" in timed.error.message
    steps = [(s.stage, s.source, s.decision) for s in recorder.call("t").record.steps]
    assert ("execute", "ConcurrencyLimit", "timed out waiting for a permit") in steps
    waited = registry.execute_sync(ToolExecutionInput("w", "work"))
    assert not waited.is_error
    assert pool.in_use == 0


def test_per_agent_and_overall_caps_share_permits_across_tools() -> None:
    limit = ConcurrencyLimit(per_tool={"web_*": 2}, per_agent=3, overall=5)
    assert [p.capacity for p in limit.pools("web_fetch", "a")] == [2, 3, 5]
    assert [p.capacity for p in limit.pools("read_file", "a")] == [3, 5]
    assert limit.pools("read_file", "a")[0] is limit.pools("web_fetch", "a")[1]
    assert limit.pools("read_file", "b")[0] is not limit.pools("read_file", "a")[0]
    with pytest.raises(DefinitionError, match="per_agent must be an integer >= 1"):
        ConcurrencyLimit(per_agent=0)


def budget_registry(budget: CallBudget) -> tuple[ToolRegistry, CallRecorder]:
    recorder = CallRecorder()
    registry = ToolRegistry(tracer=recorder)
    registry.register(
        define_tool(name="web_fetch", description="f", parameters={}, execute=lambda a, c: "page")
    )
    registry.register(
        define_tool(name="read_file", description="r", parameters={}, execute=lambda a, c: "text")
    )
    registry.add_plugin(budget)
    return registry, recorder


def test_a_call_over_budget_is_denied_with_a_reason_the_model_can_act_on() -> None:
    registry, recorder = budget_registry(CallBudget(2, "web_fetch", name="fetch budget"))
    scope = registry.scope("agent")

    ran = [scope.execute_sync(ToolExecutionInput(f"c{i}", "web_fetch")) for i in range(3)]
    other = registry.execute_sync(ToolExecutionInput("o", "web_fetch"))
    unbudgeted = scope.execute_sync(ToolExecutionInput("r", "read_file"))

    assert [result.is_error for result in ran] == [False, False, True]
    denied = ran[2]
    assert isinstance(denied, ToolExecutionFailure)
    assert denied.error.info.code == ErrorCode.DENIED
    assert "limit of 2 web_fetch calls reached" in denied.error.message
    decided = recorder.call("c2").record.decided_by
    assert decided is not None
    assert decided.detail is not None
    assert decided.detail["rule"] == "fetch budget"
    assert not other.is_error
    assert not unbudgeted.is_error


def test_a_windowed_budget_counts_only_recent_calls() -> None:
    now = [1000.0]
    budget = CallBudget(1, "web_*", window_s=3600, clock=lambda: now[0])
    registry, _ = budget_registry(budget)
    assert not registry.execute_sync(ToolExecutionInput("a", "web_fetch")).is_error
    assert registry.execute_sync(ToolExecutionInput("b", "web_fetch")).is_error
    now[0] += 3600  # the first call is now an hour old
    assert not registry.execute_sync(ToolExecutionInput("c", "web_fetch")).is_error
    assert budget.spent(None) == 1


def test_a_cap_of_one_makes_the_tools_calls_exclusive() -> None:
    registry = ToolRegistry()
    for name in ("look", "write"):
        registry.register(
            define_tool(
                name=name,
                description=name,
                parameters={},
                execute=lambda args, ctx: "",
                is_concurrency_safe=lambda args: True,
            )
        )
    registry.add_plugin(ConcurrencyLimit(per_tool={"write": 1, "*": 4}))

    assert registry.execution_mode(ToolExecutionInput("1", "look")) == "parallel"
    assert registry.execution_mode(ToolExecutionInput("2", "write")) == "exclusive"


@pytest.mark.parametrize("driver", ["execute_sync", "execute"])
def test_a_body_abandoned_at_its_deadline_keeps_its_permit_until_it_returns(driver: str) -> None:
    """A plain body past its deadline ends the call, but its thread runs on: the permit
    stays taken until the body returns, so the cap holds for bodies still running."""
    release = threading.Event()
    entered: list[int] = []

    def body(args: Any, ctx: ToolRunContext) -> str:
        entered.append(args["i"])
        if args["i"] == 0:
            release.wait(60)
        return "done"

    registry, pool = capped_registry(body, cap=1, timeout_ms=50)

    def run(index: int) -> ToolExecutionResult:
        if driver == "execute_sync":
            return registry.execute_sync(call(index))
        return anyio.run(registry.execute, call(index))

    first = run(0)
    assert isinstance(first, ToolExecutionFailure)
    assert first.error.info.code == ErrorCode.TOOL_TIMEOUT
    second = run(1)  # the abandoned body still holds the only permit
    assert isinstance(second, ToolExecutionFailure)
    assert second.error.info.code == ErrorCode.TOOL_TIMEOUT
    assert entered == [0]
    release.set()
    until(lambda: pool.try_acquire())
    pool.release()
    third = run(2)
    assert not third.is_error
    assert entered == [0, 2]


@pytest.mark.parametrize("driver", ["execute_sync", "execute"])
def test_the_wait_for_a_permit_counts_against_the_tools_timeout(driver: str) -> None:
    """``timeout_ms`` runs from when the call starts waiting for its permits: a body
    that waited is left what remains of it (else waiting would stretch every deadline)."""
    release = threading.Event()
    seen: dict[int, tuple[float, float]] = {}

    def body(args: Any, ctx: ToolRunContext) -> str:
        if args["i"] == 0:
            release.wait(60)
        else:
            assert ctx.signal.deadline is not None
            seen[args["i"]] = (time.monotonic(), ctx.signal.deadline.at)
        return "done"

    registry, pool = capped_registry(body, cap=1, timeout_ms=10_000)
    results: list[ToolExecutionResult] = []

    def run(index: int) -> None:
        if driver == "execute_sync":
            results.append(registry.execute_sync(call(index)))
        else:
            results.append(anyio.run(registry.execute, call(index)))

    threads = [threading.Thread(target=run, args=(index,)) for index in (0, 1)]
    threads[0].start()
    until(lambda: pool.in_use == 1)
    threads[1].start()
    until(lambda: pool.waiting == 1)
    time.sleep(0.3)  # the second call waits at least this long
    release.set()
    for thread in threads:
        thread.join()

    assert [result.is_error for result in results] == [False, False]
    started, deadline = seen[1]
    assert deadline - started < 10 - 0.25


def test_the_per_agent_tables_do_not_grow_with_the_number_of_agents() -> None:
    """Behind MCP over HTTP every client is an agent: the per-agent pools of a
    ConcurrencyLimit, its routes and a windowed CallBudget's spending keep only the agents
    that matter now."""
    import gc
    import tracemalloc

    now = [0.0]
    registry = ToolRegistry()
    registry.register(
        define_tool(name="work", description="w", parameters={}, execute=lambda a, c: "")
    )
    registry.add_plugin(ConcurrencyLimit(per_tool=4, per_agent=2))
    registry.add_plugin(CallBudget(3, "work", window_s=60, clock=lambda: now[0]))

    def agents(first: int, count: int) -> None:
        for n in range(first, first + count):
            assert not registry.execute_sync(
                ToolExecutionInput("c", "work", agent=f"a{n}")
            ).is_error
            now[0] += 1.0  # an agent's one call leaves the window a minute later

    mine = [
        tracemalloc.Filter(True, "*dsh_tools_plugins/limits.py"),
        tracemalloc.Filter(True, "*dsh_tools_plugins/_limits/*"),
        tracemalloc.Filter(True, "*dsh_tools/_permits.py"),
    ]
    tracemalloc.start()
    try:
        agents(0, 1_000)
        gc.collect()
        before = tracemalloc.take_snapshot().filter_traces(mine)
        agents(1_000, 10_000)
        gc.collect()
        after = tracemalloc.take_snapshot().filter_traces(mine)
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert grown < 50_000, f"{grown} bytes more for 10,000 more agents"


def test_a_dropped_pool_grants_nothing_and_its_late_caller_takes_the_current_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An idle agent's pool is dropped once the table doubles; a call that found the
    dropped pool (it looked just before) gets no permit from it, and takes one of its
    agent's current pool instead, so the agent's cap still holds."""
    gate = threading.Event()
    registry = ToolRegistry()
    registry.register(
        define_tool(name="work", description="w", parameters={}, execute=lambda a, c: gate.wait(60))
    )
    limit = ConcurrencyLimit(per_agent=1)
    registry.add_plugin(limit)
    stale = limit.pools("work", "x")
    busy = limit.pools("work", "busy")
    assert busy[0].try_acquire()  # held: never dropped
    for n in range(200):
        limit.pools("work", f"other-{n}")
    current = limit.pools("work", "x")
    assert current[0] is not stale[0]
    assert limit.pools("work", "busy")[0] is busy[0]
    assert not stale[0].try_acquire()
    with pytest.raises(Retired):
        anyio.run(stale[0].acquire)

    looked: list[int] = []
    found = limit.pools

    def late(name: str, agent: str | None) -> tuple[Permits, ...]:
        looked.append(1)
        return stale if len(looked) <= 2 else found(name, agent)  # before the drop

    monkeypatch.setattr(limit, "pools", late)
    results: list[ToolExecutionResult] = []
    first = threading.Thread(
        target=lambda: results.append(
            registry.execute_sync(ToolExecutionInput("c1", "work", agent="x"))
        )
    )
    first.start()
    until(lambda: current[0].in_use == 1 or bool(results))
    assert current[0].try_acquire() is False  # the agent's cap of 1 holds
    gate.set()
    first.join()
    assert not results[0].is_error
    assert current[0].in_use == 0
    busy[0].release()
