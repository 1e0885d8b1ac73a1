"""Nothing a tool or plugin raises ends the turn (issue 16, reproductions r08 and r11).

``SystemExit`` (argparse inside a wrapped CLI), a ``CancelledError`` nobody sent to the
caller, ``GeneratorExit`` and home-made ``BaseException`` subclasses used to escape
``execute()`` and ``execute_sync()`` from every stage, skipping the result observers. Now
each ends the call in a failure with the stage's usual code, and the observers see it
once. Only the caller's own stop travels on: its task's native cancellation and
``KeyboardInterrupt`` (the user), after the observers ran.

A raising policy stage is a fault of policy whatever it raised: ``POLICY_ERROR`` (a guard:
``DENIED``), never the code a raised ``DshToolsError`` carried, which the message names.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import types
from collections.abc import Callable, Generator
from typing import Any

import anyio
import pytest

from dsh_tools import (
    Accept,
    ApprovalOutcome,
    ApprovalRequest,
    Ask,
    ToolError,
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolRegistry,
    define_tool,
    hookimpl,
)
from dsh_tools._cancel import CancelSource
from dsh_tools.approvals import MemoryApprovalStore


class Escaped(BaseException):
    """A home-made ``BaseException``, as some libraries define for their own control flow."""


def _exit() -> None:
    argparse.ArgumentParser(prog="wrapped").parse_args(["--bad-flag"])  # sys.exit(2)


def _stray_cancel() -> None:
    raise asyncio.CancelledError()  # no one cancelled the caller


def _generator_exit() -> None:
    raise GeneratorExit()


def _escaped() -> None:
    raise Escaped("escape hatch")


def _coded() -> None:
    raise ToolError("quota service unreachable", code="TRANSIENT")


RAISERS: dict[str, Callable[[], None]] = {
    "SystemExit": _exit,
    "CancelledError": _stray_cancel,
    "GeneratorExit": _generator_exit,
    "Escaped": _escaped,
}

STAGES = {
    # stage: (the code its fault makes, whether the call still succeeds)
    "body": "TOOL_ERROR",
    "pre_execute": "POLICY_ERROR",
    "approval": "POLICY_ERROR",
    "guard": "DENIED",
    "wrapper_before": "POLICY_ERROR",
    "wrapper_after": "POLICY_ERROR",
    "post_execute": "POLICY_ERROR",
    "finalize": "TOOL_ERROR",
    "observer": None,  # an observer's fault is logged; the call keeps its result
}

DRIVERS = ("sync", "asyncio", "trio")


class Seen:
    """Every result the observers got, per call."""

    def __init__(self) -> None:
        self.results: list[ToolExecutionResult] = []

    @hookimpl(trylast=True)  # observes after the faulty observer (added later, runs first)
    def dsh_tools_result(self, execution: ToolExecution, result: ToolExecutionResult) -> None:
        self.results.append(result)


class Approver:
    def __init__(self, raise_: Callable[[], None] | None) -> None:
        self.raise_ = raise_

    def request(self, request: ApprovalRequest) -> ApprovalOutcome:
        if self.raise_ is not None:
            self.raise_()
        return ApprovalOutcome.ALLOWED_ONCE


def _registry(stage: str, raise_: Callable[[], None]) -> tuple[ToolRegistry, Seen, list[str]]:
    """A registry with one tool ``t`` whose ``stage`` calls ``raise_``; ``ran`` lists the
    body's runs."""
    ran: list[str] = []

    def body(arguments: Any, ctx: Any) -> str:
        ran.append("body")
        if stage == "body":
            raise_()
        return "secret output"

    def finalize(execution: ToolExecution, result: ToolExecutionResult) -> None:
        if stage == "finalize":
            raise_()

    registry = ToolRegistry(approval=Approver(raise_ if stage == "approval" else None))
    registry.register(
        define_tool(
            name="t", description="d", parameters={}, execute=body, finalize_content=finalize
        )
    )
    seen = Seen()
    registry.add_plugin(seen)

    class Faulty:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> Ask | None:
            if stage == "pre_execute":
                raise_()
            return Ask("confirm") if stage == "approval" else None

        @hookimpl
        def dsh_tools_guard(self, execution: ToolExecution) -> None:
            if stage == "guard":
                raise_()

        @hookimpl(wrapper=True)
        def dsh_tools_execute(self, execution: ToolExecution) -> Generator[None, Any, Any]:
            if stage == "wrapper_before":
                raise_()
            dispatch = yield
            if stage != "wrapper_after":
                return dispatch

            async def after(signal: Any = None) -> ToolExecutionResult:
                await dispatch(signal)
                raise_()
                raise AssertionError("unreachable")

            return after

        @hookimpl
        def dsh_tools_post_execute(self, execution: ToolExecution) -> None:
            if stage == "post_execute":
                raise_()

        @hookimpl
        def dsh_tools_result(self, execution: ToolExecution) -> None:
            if stage == "observer":
                raise_()

    registry.add_plugin(Faulty())
    return registry, seen, ran


def _run(registry: ToolRegistry, call: ToolExecutionInput, driver: str) -> ToolExecutionResult:
    if driver == "sync":
        return registry.execute_sync(call)
    return anyio.run(registry.execute, call, backend=driver)


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("raised", sorted(RAISERS))
@pytest.mark.parametrize("stage", sorted(STAGES))
def test_a_base_exception_from_any_stage_is_contained_and_observed(
    stage: str, raised: str, driver: str
) -> None:
    if raised == "CancelledError" and driver == "asyncio" and sys.version_info < (3, 11):
        pytest.skip("Python 3.10 takes every CancelledError on a loop as the caller's")
    registry, seen, _ran = _registry(stage, RAISERS[raised])

    result = _run(registry, ToolExecutionInput("c1", "t", {}, agent="agent"), driver)

    code = STAGES[stage]
    if code is None:
        assert not result.is_error, result
    else:
        assert isinstance(result, ToolExecutionFailure), result
        assert result.code == code
        assert raised in result.error.message
        assert result.error.info.name == raised
    assert seen.results == [result]  # observed once, exactly what the caller got


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize(
    "stage", ["pre_execute", "approval", "guard", "wrapper_before", "wrapper_after", "post_execute"]
)
def test_a_policy_stage_raising_a_coded_error_is_a_policy_fault(stage: str, driver: str) -> None:
    registry, seen, ran = _registry(stage, _coded)

    result = _run(registry, ToolExecutionInput("c1", "t", {}, agent="agent"), driver)

    assert isinstance(result, ToolExecutionFailure)
    assert result.code == ("DENIED" if stage == "guard" else "POLICY_ERROR")
    assert "quota service unreachable" in result.error.message
    assert "TRANSIENT" in result.error.message  # the raised code, named
    assert seen.results == [result]
    if stage in ("pre_execute", "approval", "guard", "wrapper_before"):
        assert ran == []  # fail closed: the body never ran


def test_a_cancelled_sub_task_is_the_tools_failure_not_the_callers_cancellation() -> None:
    # r08: the body awaits a task it cancelled itself; on Python 3.11+ the caller's own
    # task is not being cancelled, so this is the tool's failure.
    if sys.version_info < (3, 11):
        pytest.skip("Python 3.10 cannot tell a sub-task's CancelledError from the caller's")

    async def body(arguments: Any, ctx: Any) -> object:
        task = asyncio.ensure_future(asyncio.sleep(10))
        await asyncio.sleep(0)
        task.cancel()
        return await task

    registry = ToolRegistry()
    registry.register(define_tool(name="sub", description="d", parameters={}, execute=body))
    seen = Seen()
    registry.add_plugin(seen)

    async def main() -> tuple[ToolExecutionResult, bool]:
        result = await registry.execute(ToolExecutionInput("c1", "sub", {}))
        await asyncio.sleep(0)  # the caller's task was not left cancelled
        return result, asyncio.current_task().cancelling() > 0  # type: ignore[union-attr]

    result, still_cancelling = anyio.run(main, backend="asyncio")

    assert isinstance(result, ToolExecutionFailure)
    assert result.code == "TOOL_ERROR"
    assert result.error.info.name == "CancelledError"
    assert not still_cancelling
    assert seen.results == [result]


@pytest.mark.parametrize("with_signal", [False, True], ids=["no-signal", "signal"])
@pytest.mark.parametrize("stage", ["pre_execute", "post_execute", "observer"])
def test_an_async_plugin_awaiting_a_cancelled_sub_task_is_a_plugin_fault(
    stage: str, with_signal: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # Awaited under the pipeline's own cancel scope when the call has a signal.
    if sys.version_info < (3, 11):
        pytest.skip("Python 3.10 cannot tell a sub-task's CancelledError from the caller's")

    async def await_a_cancelled_task() -> None:
        task = asyncio.ensure_future(asyncio.sleep(10))
        await asyncio.sleep(0)
        task.cancel()
        await task

    class Plugin:
        @hookimpl
        async def dsh_tools_pre_execute(self) -> None:
            if stage == "pre_execute":
                await await_a_cancelled_task()

        @hookimpl
        async def dsh_tools_post_execute(self) -> None:
            if stage == "post_execute":
                await await_a_cancelled_task()

        @hookimpl
        async def dsh_tools_result(self) -> None:
            if stage == "observer":
                await await_a_cancelled_task()

    registry = ToolRegistry()
    registry.register(
        define_tool(name="t", description="d", parameters={}, execute=lambda a, c: "ok")
    )
    seen = Seen()
    registry.add_plugin(seen)
    registry.add_plugin(Plugin())
    signal = CancelSource().signal if with_signal else None

    result = anyio.run(registry.execute, ToolExecutionInput("c1", "t", {}, signal=signal))

    if stage == "observer":
        assert not result.is_error
        assert "result observer" in caplog.text
        assert "CancelledError" in caplog.text
    else:
        assert isinstance(result, ToolExecutionFailure)
        assert result.code == "POLICY_ERROR"
        assert "CancelledError" in result.error.message
    assert seen.results == [result]


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_body_without_any_plugin_is_contained_too(driver: str) -> None:
    # No plugin, no signal: the call takes the direct runner, the body step alone.
    registry = ToolRegistry()
    registry.register(
        define_tool(name="cli", description="d", parameters={}, execute=lambda a, c: _exit())
    )

    result = _run(registry, ToolExecutionInput("c1", "cli", {}), driver)

    assert isinstance(result, ToolExecutionFailure)
    assert result.code == "TOOL_ERROR"
    assert result.error.message == "SystemExit: 2"


@pytest.mark.parametrize("driver", DRIVERS)
def test_an_error_whose_message_raises_a_base_exception_is_still_contained(driver: str) -> None:
    # What a failure says is read from the plugin's own exception: its __str__ is code too.
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise SystemExit(2)

    def guard(execution: ToolExecution) -> str | None:
        raise Unprintable()

    registry = ToolRegistry()
    registry.register(define_tool(name="t", description="d", parameters={}, execute=_escaped))
    registry.guard(guard)

    result = _run(registry, ToolExecutionInput("c1", "t", {}), driver)

    assert isinstance(result, ToolExecutionFailure)
    assert result.code == "DENIED"
    assert result.error.message.endswith("failed: <unprintable thrown value>")


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_decision_whose_repr_raises_a_base_exception_is_still_contained(driver: str) -> None:
    class Unshowable:
        def __repr__(self) -> str:
            raise SystemExit(2)

    class Odd:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> object:
            return Unshowable()

    registry = ToolRegistry()
    registry.register(define_tool(name="t", description="d", parameters={}, execute=_escaped))
    registry.add_plugin(Odd())

    result = _run(registry, ToolExecutionInput("c1", "t", {}), driver)

    assert isinstance(result, ToolExecutionFailure)
    assert result.code == "POLICY_ERROR"
    assert "returned <unprintable " in result.error.message


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_call_card_raising_a_base_exception_still_leaves_a_pending_ticket(driver: str) -> None:
    # A pending call's ticket carries its card for whoever answers; the tool's
    # present_call is the tool's code, and the ticket holds the arguments either way.
    class AskAlways:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> Ask:
            return Ask("confirm")

    store = MemoryApprovalStore()
    registry = ToolRegistry(approval=lambda request: "pending", approval_store=store)
    registry.register(
        define_tool(
            name="t",
            description="d",
            parameters={},
            execute=_escaped,
            present_call=lambda arguments: _exit(),
        )
    )
    registry.add_plugin(AskAlways())

    result = _run(registry, ToolExecutionInput("c1", "t", {}, agent="coder"), driver)

    assert isinstance(result, ToolExecutionFailure)
    assert result.code == "APPROVAL_PENDING"
    ticket = store.get_ticket(result.meta["approval"]["ticket"])
    assert ticket is not None
    assert ticket.card is None


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("stage", ["body", "pre_execute", "post_execute"])
def test_keyboard_interrupt_propagates_after_the_observers_saw_the_call_aborted(
    stage: str, driver: str
) -> None:
    def interrupt() -> None:
        raise KeyboardInterrupt

    registry, seen, _ran = _registry(stage, interrupt)

    with pytest.raises(KeyboardInterrupt):
        _run(registry, ToolExecutionInput("c1", "t", {}, agent="agent"), driver)

    assert [type(r) for r in seen.results] == [ToolExecutionFailure]
    failure = seen.results[0]
    assert isinstance(failure, ToolExecutionFailure)
    assert failure.code in ("ABORTED", "ABORTED_BEFORE_DISPATCH")


def test_the_callers_native_cancellation_still_propagates_after_the_observers() -> None:
    started = anyio.Event()

    async def body(arguments: Any, ctx: Any) -> str:
        started.set()
        await anyio.sleep_forever()
        return "never"

    registry = ToolRegistry()
    registry.register(define_tool(name="hang", description="d", parameters={}, execute=body))
    seen = Seen()
    registry.add_plugin(seen)
    outcome: list[str] = []

    async def main() -> None:
        async with anyio.create_task_group() as group:

            async def call() -> None:
                try:
                    await registry.execute(ToolExecutionInput("c1", "hang", {}))
                except anyio.get_cancelled_exc_class():
                    outcome.append("cancelled")
                    raise
                outcome.append("returned")

            group.start_soon(call)
            await started.wait()
            group.cancel_scope.cancel()

    anyio.run(main, backend="asyncio")
    assert outcome == ["cancelled"]
    assert [r.code for r in seen.results] == ["ABORTED"]  # type: ignore[union-attr]


@pytest.mark.parametrize("half_imported", ["asyncio", "trio"])
def test_execute_sync_copes_with_an_event_loop_library_another_thread_is_importing(
    monkeypatch: pytest.MonkeyPatch, half_imported: str
) -> None:
    # While another thread imports asyncio (or trio), sys.modules already holds the
    # module, still without its functions; execute_sync must not fail on it.
    registry = ToolRegistry()
    registry.register(
        define_tool(name="t", description="d", parameters={}, execute=lambda a, c: "ok")
    )

    class Observer:
        @hookimpl
        def dsh_tools_post_execute(self) -> Accept | None:
            return None

    registry.add_plugin(Observer())  # a staged call: every loop check on the way
    monkeypatch.setitem(sys.modules, half_imported, types.ModuleType(half_imported))

    result = registry.execute_sync(ToolExecutionInput("c1", "t", {}, agent="agent"))

    assert not result.is_error, result
    assert result.text == "ok"
