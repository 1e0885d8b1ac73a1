"""Cooperative cancellation (``CancelSource``), timeouts and native task cancellation.

Behaviors B146-B160 of ``/work/shared/spec/behaviors.md`` (B161 is Code Mode: skipped).
``ABORTED_BEFORE_DISPATCH``: the body never started; ``ABORTED``: it had; failures are
never overridden by cancellation.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import attrs
import pytest

from dsh_tools._cancel import CancelSignal, CancelSource
from dsh_tools._content import ContextMessage
from dsh_tools._context import ToolRunContext
from dsh_tools._define import define_tool
from dsh_tools._models import (
    Accept,
    Allow,
    ApprovalRequest,
    Ask,
    Deny,
    ToolDefinition,
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolExecutionSuccess,
    failure_result,
)
from dsh_tools._registry import ToolRegistry
from dsh_tools.errors import ToolError
from dsh_tools.hookspecs import hookimpl

BEFORE = "ABORTED_BEFORE_DISPATCH"


def text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def context(id: str) -> ContextMessage:
    return ContextMessage(id=id, content=id, source="test")


def tool(
    body: Callable[[Any, ToolRunContext], Any] | None = None,
    *,
    name: str = "echo",
    **options: Any,
) -> ToolDefinition[Any]:
    return define_tool(
        name=name,
        description="A test tool.",
        parameters={"text": {"type": "string", "required": True}},
        execute=body or (lambda args, ctx: args["text"]),
        **options,
    )


def call(
    source: CancelSource | None = None, name: str = "echo", **fields: Any
) -> ToolExecutionInput:
    fields.setdefault("arguments", {"text": "hi"})
    signal = source.signal if source is not None else None
    return ToolExecutionInput(call_id="call-1", name=name, signal=signal, **fields)


def failure(result: ToolExecutionResult) -> ToolExecutionFailure:
    assert isinstance(result, ToolExecutionFailure), result
    return result


class Observed:
    """Logs post-execute and result hooks; keeps what the result observers saw."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.results: list[ToolExecutionResult] = []
        self.executions: list[ToolExecution] = []

    @hookimpl
    def dsh_tools_post_execute(self) -> None:
        self.log.append("post")

    @hookimpl
    def dsh_tools_result(self, execution: ToolExecution, result: ToolExecutionResult) -> None:
        self.log.append("result")
        self.executions.append(execution)
        self.results.append(result)


def wrapper(around: Callable[[Any, Any], Any]) -> object:
    class Wrapper:
        @hookimpl(wrapper=True)
        def dsh_tools_execute(self) -> Any:
            dispatch = yield

            async def wrapped(signal: CancelSignal | None = None) -> Any:
                return await around(dispatch, signal)

            return wrapped

    return Wrapper()


def pre_plugin(decide: Callable[[], Any]) -> object:
    class Pre:
        @hookimpl
        def dsh_tools_pre_execute(self) -> Any:
            return decide()

    return Pre()


def post_plugin(decide: Callable[[ToolExecutionResult], Any]) -> object:
    class Post:
        @hookimpl
        def dsh_tools_post_execute(self, result: ToolExecutionResult) -> Any:
            return decide(result)

    return Post()


# ------------------------------------------------------------------ before dispatch


def test_pre_aborted_call_runs_nothing_but_finalize_and_observers() -> None:
    # B146, B147: exact shape, arguments still materialized, observers see caller's signal.
    log: list[str] = []
    source = CancelSource()
    source.cancel()
    registry = ToolRegistry()
    registry.register(
        tool(
            lambda args, ctx: log.append("body"),
            finalize_content=lambda execution, result: log.append("finalize"),  # type: ignore[func-returns-value]
        )
    )
    registry.guard(lambda execution: log.append("guard"))  # type: ignore[func-returns-value]
    registry.add_plugin(pre_plugin(lambda: log.append("pre")))
    registry.add_plugin(wrapper(lambda dispatch, signal: log.append("wrapper")))
    observed = Observed(log)
    registry.add_plugin(observed)
    result = failure(registry.execute_sync(call(source)))
    assert log == ["finalize", "result"]
    assert result.error.message == "tool call aborted before dispatch"
    assert (result.error.info.name, result.code) == ("AbortError", BEFORE)
    assert result.content == [text("Error: tool call aborted before dispatch")]
    assert (result.meta, result.additional_contexts) == (None, ())
    [execution] = observed.executions
    assert execution.signal is source.signal
    assert execution.arguments == {"text": "hi"}


def test_pre_aborted_unknown_name_is_aborted_and_non_json_arguments_win() -> None:
    # B148, B051
    source = CancelSource()
    source.cancel()
    registry = ToolRegistry()
    assert failure(registry.execute_sync(call(source, "ghost"))).code == BEFORE
    result = failure(registry.execute_sync(call(source, "ghost", arguments={"x": {1}})))
    assert result.code == "INVALID_JSON"


def test_abort_during_pre_execute_with_allow_aborts_before_dispatch_on_the_post_path() -> None:
    # B149: guards still run, post-execute runs, body never does.
    log: list[str] = []
    source = CancelSource()
    registry = ToolRegistry()
    registry.register(tool(lambda args, ctx: log.append("body")))
    registry.guard(lambda execution: log.append("guard"))  # type: ignore[func-returns-value]
    registry.add_plugin(Observed(log))
    registry.add_plugin(pre_plugin(lambda: source.cancel() or Allow()))
    result = failure(registry.execute_sync(call(source)))
    assert result.code == BEFORE
    assert log == ["guard", "post", "result"]


def test_guard_denial_wins_over_an_abort_during_pre_execute() -> None:
    # B149
    source = CancelSource()
    registry = ToolRegistry()
    registry.register(tool())
    registry.guard(lambda execution: "guarded")
    registry.add_plugin(pre_plugin(lambda: source.cancel()))
    result = failure(registry.execute_sync(call(source)))
    assert (result.code, result.error.message) == ("DENIED", "guarded")


def test_deny_or_error_settling_after_the_abort_is_kept() -> None:
    # B150
    source = CancelSource()
    registry = ToolRegistry()
    registry.register(tool())
    registry.add_plugin(pre_plugin(lambda: source.cancel() or Deny("policy denied the call")))
    result = failure(registry.execute_sync(call(source)))
    assert result.error.message == "policy denied the call"
    assert result.content == [text("Error: policy denied the call")]

    def broken() -> None:
        source.cancel()
        raise ToolError("policy failed", code="POLICY_FAILED")

    source = CancelSource()
    registry = ToolRegistry()
    registry.register(tool())
    registry.add_plugin(pre_plugin(broken))
    assert failure(registry.execute_sync(call(source))).code == "POLICY_ERROR"


@pytest.mark.parametrize("outcome", ["allowed-once", "cancelled"])
def test_approval_answered_after_the_abort_is_aborted_before_dispatch(outcome: str) -> None:
    # B151 (allowed-once), B068 (cancelled while the caller aborted): post path.
    log: list[str] = []
    source = CancelSource()

    class Service:
        def request(self, request: ApprovalRequest) -> str:
            assert request.signal is source.signal
            source.cancel()
            return outcome

    registry = ToolRegistry(approval=Service())
    registry.register(tool(lambda args, ctx: log.append("body")))
    registry.add_plugin(pre_plugin(lambda: Ask()))
    registry.add_plugin(Observed(log))
    result = failure(registry.execute_sync(call(source, agent="a")))
    assert result.code == BEFORE
    assert log == ["post", "result"]


@pytest.mark.anyio
async def test_abort_while_wrapper_awaits_makes_dispatch_abort_without_the_body() -> None:
    # B152
    log: list[str] = []
    source = CancelSource()
    inner: list[ToolExecutionResult] = []

    async def around(dispatch: Any, signal: Any) -> Any:
        await anyio.sleep(0)
        source.cancel()
        inner.append(await dispatch(signal))
        return inner[0]

    registry = ToolRegistry()
    registry.register(tool(lambda args, ctx: log.append("body")))
    registry.add_plugin(wrapper(around))
    result = failure(await registry.execute(call(source)))
    assert result.code == BEFORE
    assert inner == [result]
    assert log == []


def test_aborted_replacement_signal_aborts_before_dispatch() -> None:
    # B153: the caller never aborted.
    log: list[str] = []
    source, replacement = CancelSource(), CancelSource()
    replacement.cancel()

    async def around(dispatch: Any, signal: Any) -> Any:
        return await dispatch(replacement.signal)

    registry = ToolRegistry()
    registry.register(tool(lambda args, ctx: log.append("body")))
    registry.add_plugin(wrapper(around))
    assert failure(registry.execute_sync(call(source))).code == BEFORE
    assert not source.cancelled
    assert log == []


def test_short_circuit_success_after_the_abort_keeps_wrapper_contexts() -> None:
    # B154
    source = CancelSource()

    async def around(dispatch: Any, signal: Any) -> Any:
        source.cancel()
        return ToolExecutionSuccess(
            value="cached", content=["cached"], additional_contexts=[context("wrapper")]
        )

    registry = ToolRegistry()
    registry.register(tool())
    registry.add_plugin(wrapper(around))
    result = failure(registry.execute_sync(call(source)))
    assert result.code == BEFORE
    assert result.additional_contexts == (context("wrapper"),)


# ------------------------------------------------------------------ after dispatch


def deferring_body(args: Any, ctx: ToolRunContext) -> str:
    ctx.defer_context(context("deferred"))
    return "done"


def test_abort_while_wrapper_settles_is_aborted_with_deferred_contexts() -> None:
    # B155
    source = CancelSource()

    async def around(dispatch: Any, signal: Any) -> Any:
        result = await dispatch(signal)
        source.cancel()
        return result

    registry = ToolRegistry()
    registry.register(tool(deferring_body))
    registry.add_plugin(wrapper(around))
    result = failure(registry.execute_sync(call(source)))
    assert result.error.message == "tool call aborted"
    assert (result.error.info.name, result.code) == ("AbortError", "ABORTED")
    assert result.additional_contexts == (context("deferred"),)


def test_abort_during_post_execute_is_aborted_with_deferred_and_post_contexts() -> None:
    # B156
    source = CancelSource()

    def decide(result: ToolExecutionResult) -> Accept:
        source.cancel()
        return Accept(additional_contexts=[context("post")])

    registry = ToolRegistry()
    registry.register(tool(deferring_body))
    registry.add_plugin(post_plugin(decide))
    result = failure(registry.execute_sync(call(source)))
    assert result.code == "ABORTED"
    assert result.additional_contexts == (context("deferred"), context("post"))


def test_cancellation_never_overrides_a_body_failure() -> None:
    # B157: a body that observes the abort and raises keeps its own error.
    source = CancelSource()

    def body(args: Any, ctx: ToolRunContext) -> str:
        source.cancel()
        assert ctx.signal.cancelled
        raise ToolError("tool failed", code="TOOL_FAILURE")

    registry = ToolRegistry()
    registry.register(tool(body))
    result = failure(registry.execute_sync(call(source)))
    assert (result.error.message, result.code) == ("tool failed", "TOOL_FAILURE")


def test_cancellation_never_overrides_wrapper_post_or_denial_failures() -> None:
    # B157
    source = CancelSource()

    async def broken(dispatch: Any, signal: Any) -> Any:
        await dispatch(signal)
        source.cancel()
        raise RuntimeError("wrapper failed")

    registry = ToolRegistry()
    registry.register(tool())
    registry.add_plugin(wrapper(broken))
    assert failure(registry.execute_sync(call(source))).code == "POLICY_ERROR"

    source = CancelSource()

    def post(result: ToolExecutionResult) -> None:
        source.cancel()
        raise RuntimeError("post failed")

    registry = ToolRegistry()
    registry.register(tool())
    registry.add_plugin(post_plugin(post))
    assert failure(registry.execute_sync(call(source))).code == "POLICY_ERROR"

    source = CancelSource()
    registry = ToolRegistry()
    registry.register(tool())
    registry.guard(lambda execution: source.cancel() or "denied")  # type: ignore[func-returns-value]
    registry.add_plugin(post_plugin(lambda result: source.cancel()))
    assert failure(registry.execute_sync(call(source))).code == "DENIED"


@pytest.mark.anyio
async def test_uncooperative_started_body_is_awaited_then_aborted() -> None:
    # B158: execute() stays pending until the body settles.
    source = CancelSource()
    started = anyio.Event()
    log: list[str] = []

    async def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.defer_context(context("deferred"))
        started.set()
        with anyio.CancelScope(shield=True):
            await anyio.sleep(0.05)
        log.append("body settled")
        return "done"

    registry = ToolRegistry()
    registry.register(tool(body))
    results: list[ToolExecutionResult] = []

    async def run() -> None:
        results.append(await registry.execute(call(source)))
        log.append("execute returned")

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await started.wait()
        source.cancel()
        log.append("caller cancelled")
    assert log == ["caller cancelled", "body settled", "execute returned"]
    [result] = results
    assert failure(result).code == "ABORTED"
    assert result.additional_contexts == (context("deferred"),)


@pytest.mark.anyio
async def test_async_body_is_interrupted_at_its_next_await_when_the_caller_cancels() -> None:
    # B146: the signal is bound to the body's cancel scope.
    source = CancelSource()
    started = anyio.Event()
    log: list[str] = []

    async def body(args: Any, ctx: ToolRunContext) -> str:
        started.set()
        try:
            await anyio.sleep(10)
        finally:
            log.append(f"body finally, signal cancelled={ctx.signal.cancelled}")
        return "never"

    registry = ToolRegistry()
    registry.register(tool(body))
    results: list[ToolExecutionResult] = []
    with anyio.fail_after(2):
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: _append(results, registry.execute(call(source))))
            await started.wait()
            source.cancel("user pressed stop")
    assert log == ["body finally, signal cancelled=True"]
    assert failure(results[0]).code == "ABORTED"


async def _append(results: list[ToolExecutionResult], awaitable: Any) -> None:
    results.append(await awaitable)


@pytest.mark.anyio
async def test_body_signal_fires_with_the_caller_while_the_replacement_stays() -> None:
    # B159
    source, replacement = CancelSource(), CancelSource()
    seen: list[bool] = []

    def body(args: Any, ctx: ToolRunContext) -> str:
        source.cancel("caller")
        seen.extend([ctx.signal.cancelled, replacement.cancelled])
        assert ctx.signal.reason == "caller"
        return "x"

    async def around(dispatch: Any, signal: Any) -> Any:
        return await dispatch(replacement.signal)

    registry = ToolRegistry()
    registry.register(tool(body))
    registry.add_plugin(wrapper(around))
    assert failure(await registry.execute(call(source))).code == "ABORTED"
    assert seen == [True, False]


def test_body_level_result_is_already_aborted_and_a_timeout_wrapper_may_replace_it() -> None:
    # B160: wrappers see ABORTED; their own TOOL_TIMEOUT failure is preserved.
    replacement = CancelSource()
    seen: list[str] = []

    def body(args: Any, ctx: ToolRunContext) -> str:
        replacement.cancel("deadline")
        return "late success"

    async def timeout_wrapper(dispatch: Any, signal: Any) -> Any:
        result = await dispatch(replacement.signal)
        seen.append(result.code)
        return failure_result('tool "echo" timed out', "TOOL_TIMEOUT")

    registry = ToolRegistry()
    registry.register(tool(body))
    registry.add_plugin(wrapper(timeout_wrapper))
    result = failure(registry.execute_sync(call(CancelSource())))
    assert seen == ["ABORTED"]
    assert result.code == "TOOL_TIMEOUT"


# ------------------------------------------------------------------ timeouts


@pytest.mark.anyio
async def test_timeout_on_a_slow_async_body_fires_its_signal() -> None:
    # E1 TOOL_TIMEOUT: the registry's own timeout, body interrupted and drained.
    log: list[str] = []

    async def slow(args: Any, ctx: ToolRunContext) -> str:
        ctx.defer_context(context("deferred"))
        try:
            await anyio.sleep(5)
        finally:
            log.append(f"finally cancelled={ctx.signal.cancelled}")
        return "never"

    registry = ToolRegistry()
    registry.register(tool(slow, name="slow", timeout_ms=30))
    observed = Observed(log)
    registry.add_plugin(observed)
    started = time.monotonic()
    result = failure(await registry.execute(call(name="slow")))
    assert time.monotonic() - started < 1
    assert result.code == "TOOL_TIMEOUT"
    assert result.error.message == 'tool "slow" timed out after 30 ms'
    assert result.additional_contexts == (context("deferred"),)
    assert log == ["finally cancelled=True", "post", "result"]


@pytest.mark.anyio
async def test_registry_default_timeout_applies_to_tools_without_one() -> None:
    async def slow(args: Any, ctx: ToolRunContext) -> str:
        await anyio.sleep(5)
        return "never"

    registry = ToolRegistry(default_timeout_ms=20)
    registry.register(tool(slow))
    assert failure(await registry.execute(call())).code == "TOOL_TIMEOUT"


@pytest.mark.anyio
async def test_fast_body_under_a_timeout_succeeds() -> None:
    async def fast(args: Any, ctx: ToolRunContext) -> str:
        await anyio.sleep(0)
        return "quick"

    registry = ToolRegistry()
    registry.register(tool(fast, timeout_ms=1000))
    with anyio.fail_after(0.5):
        assert (await registry.execute(call())).value == "quick"


@pytest.mark.anyio
async def test_body_error_under_a_timeout_keeps_its_code() -> None:
    # B136 with timeout_ms: the body's error is not wrapped in an exception group.
    async def body(args: Any, ctx: ToolRunContext) -> str:
        await anyio.sleep(0)
        raise ToolError("disk full", code="ENOSPC")

    registry = ToolRegistry()
    registry.register(tool(body, timeout_ms=1000))
    result = failure(await registry.execute(call()))
    assert (result.error.message, result.error.info.name, result.code) == (
        "disk full",
        "ToolError",
        "ENOSPC",
    )


@pytest.mark.anyio
async def test_caller_cancel_reason_timeout_is_still_an_abort() -> None:
    # B146: only the registry's own timer produces TOOL_TIMEOUT.
    source = CancelSource()

    async def body(args: Any, ctx: ToolRunContext) -> str:
        source.cancel("timeout")
        await anyio.sleep(1)
        return "never"

    registry = ToolRegistry()
    registry.register(tool(body, timeout_ms=5000))
    with anyio.fail_after(1):
        result = failure(await registry.execute(call(source)))
    assert result.code == "ABORTED"


@pytest.mark.anyio
async def test_timeout_of_a_blocking_body_is_reported_at_the_deadline() -> None:
    # blocking=True: TOOL_TIMEOUT at the deadline; the thread sees its signal fire and is
    # left to finish on its own.
    log: list[str] = []
    finished = threading.Event()

    def blocking(args: Any, ctx: ToolRunContext) -> str:
        deadline = time.monotonic() + 2
        while not ctx.signal.cancelled and time.monotonic() < deadline:
            time.sleep(0.005)
        log.append(f"thread done cancelled={ctx.signal.cancelled}")
        finished.set()
        return "late"

    registry = ToolRegistry()
    registry.register(tool(blocking, blocking=True, timeout_ms=30))
    started = time.monotonic()
    result = failure(await registry.execute(call()))
    assert time.monotonic() - started < 1
    assert result.code == "TOOL_TIMEOUT"
    assert finished.wait(2)
    assert log == ["thread done cancelled=True"]


# ------------------------------------------------------------------ native cancellation


@pytest.mark.anyio
async def test_native_cancellation_propagates_after_observers_saw_one_aborted_result() -> None:
    # design.md: never swallowed; observers run first; the body is drained.
    log: list[str] = []
    started = anyio.Event()

    async def body(args: Any, ctx: ToolRunContext) -> str:
        started.set()
        try:
            await anyio.sleep(10)
        finally:
            log.append("body drained")
        return "never"

    registry = ToolRegistry()
    registry.register(tool(body))
    observed = Observed(log)
    registry.add_plugin(observed)

    async def run() -> None:
        try:
            await registry.execute(call())
        except anyio.get_cancelled_exc_class():
            log.append("cancellation propagated")
            raise
        log.append("returned normally")

    with anyio.fail_after(2):
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await started.wait()
            group.cancel_scope.cancel()
    assert log == ["body drained", "result", "cancellation propagated"]
    [result] = observed.results
    assert failure(result).code == "ABORTED"


@pytest.mark.anyio
async def test_native_cancellation_before_dispatch_is_aborted_before_dispatch() -> None:
    log: list[str] = []
    started = anyio.Event()

    class SlowPolicy:
        @hookimpl
        async def dsh_tools_pre_execute(self) -> None:
            started.set()
            await anyio.sleep(10)

    registry = ToolRegistry()
    registry.register(tool(lambda args, ctx: log.append("body")))
    registry.add_plugin(SlowPolicy())
    observed = Observed(log)
    registry.add_plugin(observed)
    cancelled = False
    with anyio.fail_after(2):
        async with anyio.create_task_group() as group:

            async def run() -> None:
                nonlocal cancelled
                try:
                    await registry.execute(call())
                except anyio.get_cancelled_exc_class():
                    cancelled = True
                    raise

            group.start_soon(run)
            await started.wait()
            group.cancel_scope.cancel()
    assert cancelled
    assert log == ["result"]
    assert failure(observed.results[0]).code == BEFORE


@pytest.mark.anyio
async def test_native_cancellation_waits_for_a_blocking_body_thread() -> None:
    log: list[str] = []
    started = threading.Event()

    def blocking(args: Any, ctx: ToolRunContext) -> str:
        started.set()
        time.sleep(0.05)
        log.append("thread finished")
        return "x"

    registry = ToolRegistry()
    registry.register(tool(blocking, blocking=True))
    observed = Observed(log)
    registry.add_plugin(observed)
    with anyio.fail_after(2):
        async with anyio.create_task_group() as group:
            group.start_soon(_append, [], registry.execute(call()))
            while not started.is_set():
                await anyio.sleep(0.001)
            group.cancel_scope.cancel()
    assert log == ["thread finished", "result"]
    assert failure(observed.results[0]).code == "ABORTED"


@pytest.mark.anyio
async def test_wrapper_may_not_detach_the_callers_signal() -> None:
    # design.md: a wrapper may swap the signal for the inner call but not detach the caller's.
    source = CancelSource()
    seen: list[bool] = []

    def body(args: Any, ctx: ToolRunContext) -> str:
        source.cancel()
        seen.append(ctx.signal.cancelled)
        return "x"

    async def around(dispatch: Any, signal: Any) -> Any:
        return await dispatch(CancelSource().signal)

    registry = ToolRegistry()
    registry.register(tool(body))
    registry.add_plugin(wrapper(around))
    result = failure(await registry.execute(call(source)))
    assert seen == [True]
    assert result.code == "ABORTED"


def test_results_are_frozen_after_cancellation_too() -> None:
    source = CancelSource()
    source.cancel()
    registry = ToolRegistry()
    registry.register(tool())
    result = registry.execute_sync(call(source))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        result.is_error = False  # type: ignore[misc]


@pytest.mark.anyio
async def test_native_cancellation_during_an_async_observer_still_runs_every_observer() -> None:
    # B128: observers run exactly once each, even when the caller is cancelled meanwhile.
    log: list[str] = []
    observing = anyio.Event()

    class SlowObserver:
        @hookimpl
        async def dsh_tools_result(self) -> None:
            observing.set()
            await anyio.sleep(0.05)
            log.append("slow observer done")

    registry = ToolRegistry()
    registry.register(tool())
    registry.add_plugin(Observed(log))
    registry.add_plugin(SlowObserver())  # added last: observes first

    async def run() -> None:
        await registry.execute(call())
        try:
            await anyio.sleep(1)
        except anyio.get_cancelled_exc_class():
            log.append("cancelled at the next checkpoint")
            raise

    with anyio.fail_after(2):
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await observing.wait()
            group.cancel_scope.cancel()
    assert log == ["post", "slow observer done", "result", "cancelled at the next checkpoint"]


@pytest.mark.anyio
@pytest.mark.parametrize("declared_async", [True, False])
async def test_a_call_its_caller_aborts_is_finalized_and_observed_shielded_with_grace(
    declared_async: bool,
) -> None:
    # Fast core test of the abort path: finalize runs on the aborted result, and observers
    # may await (shielded from the caller's cancellation, within the grace), whether they
    # are `async def` or plain functions that return an awaitable.
    log: list[str] = []
    seen: list[ToolExecutionResult] = []
    running = anyio.Event()

    async def body(args: Any, ctx: ToolRunContext) -> str:
        running.set()
        await anyio.sleep(10)
        return "never"

    def finalized(execution: Any, result: ToolExecutionResult) -> None:
        log.append(failure(result).code)

    async def observed(result: ToolExecutionResult) -> None:
        await anyio.sleep(0.001)
        seen.append(result)

    class AsyncObserver:
        @hookimpl
        async def dsh_tools_result(self, result: ToolExecutionResult) -> None:
            await observed(result)

    class PlainObserver:
        @hookimpl
        def dsh_tools_result(self, result: ToolExecutionResult) -> Any:
            return observed(result)

    registry = ToolRegistry()
    registry.register(tool(body, finalize_content=finalized))
    registry.add_plugin(AsyncObserver() if declared_async else PlainObserver())
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(_append, [], registry.execute(call()))
            await running.wait()
            group.cancel_scope.cancel()
    assert log == ["ABORTED"]
    assert [failure(result).code for result in seen] == ["ABORTED"]
