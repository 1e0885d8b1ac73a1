"""Cancellation at every await point of the pipeline, by signal and by native cancellation.

Each cell runs one call through a registry in which every stage that may await does
(an ``async`` pre-execute that asks, an ``async`` approval service, an execute wrapper,
an ``async`` body, an ``async`` post-execute listener, an ``async`` result observer next
to a plain one) and parks the call at one await point; once it is parked the host
cancels, either through the call's :class:`~dsh_tools.CancelSource` (``signal``) or by
cancelling the anyio cancel scope around ``await registry.execute(...)`` (``native``).
Every cell runs on asyncio and on trio.

Checked in every cell: the documented error code the observers saw; whether the native
cancellation propagated out of ``execute`` (it is never swallowed; when it arrives while
the observers run it lands at the caller's next checkpoint); that a started body (and the
parked component) finished its ``finally:`` before ``execute`` returned or raised; that
both observers saw the one result exactly once; that no task or thread outlived the call.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import attrs
import pytest

from dsh_tools import _cancel as cancel
from dsh_tools._cancel import CancelSignal, CancelSource
from dsh_tools._content import ContextMessage
from dsh_tools._context import ToolRunContext
from dsh_tools._define import define_tool
from dsh_tools._models import (
    ApprovalRequest,
    Ask,
    Deny,
    ToolExecutionFailure,
    ToolExecutionInput,
    ToolExecutionResult,
)
from dsh_tools._registry import ToolRegistry
from dsh_tools.hookspecs import hookimpl

POINTS = (
    "pre_execute",
    "approval",
    "wrapper_before",
    "body",
    "body_thread",
    "wrapper_after",
    "post_execute",
    "observer",
)
MODES = ("signal", "native")

BEFORE = "ABORTED_BEFORE_DISPATCH"


@attrs.frozen
class Expect:
    code: str | None
    """The code observers saw (``None``: a success)."""
    propagated: bool
    """The native cancellation propagated out of ``execute``."""
    body_runs: int
    post_ran: bool
    """The healthy post-execute listener saw the result (the post path was taken)."""


EXPECTED: dict[tuple[str, str], Expect] = {
    # The caller's signal bounds every awaited stage: a parked policy never decides, so
    # the call is aborted before dispatch on the post path; the body never runs.
    ("pre_execute", "signal"): Expect(BEFORE, False, 0, True),
    ("approval", "signal"): Expect(BEFORE, False, 0, True),
    ("wrapper_before", "signal"): Expect(BEFORE, False, 0, True),
    # After the body started: ABORTED on the post path (the body drained first).
    ("body", "signal"): Expect("ABORTED", False, 1, True),
    ("body_thread", "signal"): Expect("ABORTED", False, 1, True),
    ("wrapper_after", "signal"): Expect("ABORTED", False, 1, True),
    # An interrupted post-execute never decided: aborted on the final path, so the
    # listener after it never sees the unreviewed result.
    ("post_execute", "signal"): Expect("ABORTED", False, 1, False),
    # The outcome was final before the observers ran: cancelling changes nothing.
    ("observer", "signal"): Expect(None, False, 1, True),
    # Native cancellation: observers see the abort, then it propagates.
    ("pre_execute", "native"): Expect(BEFORE, True, 0, False),
    ("approval", "native"): Expect(BEFORE, True, 0, False),
    ("wrapper_before", "native"): Expect(BEFORE, True, 0, False),
    ("body", "native"): Expect("ABORTED", True, 1, False),
    ("body_thread", "native"): Expect("ABORTED", True, 1, False),
    ("wrapper_after", "native"): Expect("ABORTED", True, 1, False),
    ("post_execute", "native"): Expect("ABORTED", True, 1, False),
    # Observers are shielded: the parked one finishes, execute returns the success and
    # the cancellation lands at the caller's next checkpoint.
    ("observer", "native"): Expect(None, False, 1, True),
}

PARK_SECONDS = 10.0
"""How long a parked component would wait if nothing interrupted it."""

OBSERVER_SECONDS = 0.1
"""A parked observer's own duration (observers are shielded from native cancellation)."""


class World:
    """One cell: the event log, the parking point and the caller's cancellation levers."""

    def __init__(self, point: str, mode: str) -> None:
        self.point = point
        self.mode = mode
        self.log: list[str] = []
        self.parked = anyio.Event()
        self.source = CancelSource()
        self.body_runs = 0
        self.post_seen: list[ToolExecutionResult] = []
        self.observed: dict[str, list[ToolExecutionResult]] = {"async": [], "plain": []}

    async def stage(self, name: str) -> None:
        """An awaiting stage: it parks when ``name`` is this cell's point."""
        await anyio.lowlevel.checkpoint()
        if name != self.point:
            return
        self.parked.set()
        seconds = OBSERVER_SECONDS if name == "observer" else PARK_SECONDS
        try:
            await anyio.sleep(seconds)
            self.log.append(f"{name} done")
        finally:
            self.log.append(f"{name} finally")

    def thread_body(self, signal: CancelSignal) -> str:
        """A blocking body in a worker thread: polls its signal for up to 0.1 s."""
        anyio.from_thread.run_sync(self.parked.set)
        deadline = time.monotonic() + 0.1
        while time.monotonic() < deadline and not signal.cancelled:
            time.sleep(0.002)
        return "late"

    def registry(self) -> ToolRegistry:
        world = self

        async def body(args: Any, ctx: ToolRunContext) -> str:
            world.body_runs += 1
            try:
                await world.stage("body")
                return "ok"
            finally:
                world.log.append("body finally")

        def blocking(args: Any, ctx: ToolRunContext) -> str:
            world.body_runs += 1
            try:
                return world.thread_body(ctx.signal)
            finally:
                world.log.append("body finally")

        class Approval:
            async def request(self, request: ApprovalRequest) -> str:
                await world.stage("approval")
                return "allowed-once"

        registry = ToolRegistry(approval=Approval())
        registry.register(
            define_tool(
                name="probe",
                description="A probe tool.",
                parameters={},
                execute=blocking if self.point == "body_thread" else body,
                blocking=self.point == "body_thread",
            )
        )

        class Healthy:
            @hookimpl
            def dsh_tools_post_execute(self, result: ToolExecutionResult) -> None:
                world.post_seen.append(result)

            @hookimpl
            def dsh_tools_result(self, result: ToolExecutionResult) -> None:
                world.observed["plain"].append(result)

        class Awaiting:
            @hookimpl
            async def dsh_tools_pre_execute(self) -> Ask:
                await world.stage("pre_execute")
                return Ask("a person reviews probes")

            @hookimpl(wrapper=True)
            def dsh_tools_execute(self) -> Any:
                dispatch = yield

                async def wrapped(signal: CancelSignal | None = None) -> Any:
                    await world.stage("wrapper_before")
                    result = await dispatch(signal)
                    await world.stage("wrapper_after")
                    return result

                return wrapped

            @hookimpl
            async def dsh_tools_post_execute(self) -> None:
                await world.stage("post_execute")

            @hookimpl
            async def dsh_tools_result(self, result: ToolExecutionResult) -> None:
                world.observed["async"].append(result)
                await world.stage("observer")

        registry.add_plugin(Healthy())
        registry.add_plugin(Awaiting())  # added last: its hooks run first
        return registry


@attrs.frozen
class Outcome:
    code: str | None
    propagated: bool
    body_runs: int
    post_ran: bool


def _tasks(backend: str) -> int:
    return len(asyncio.all_tasks()) if backend == "asyncio" else 0


async def run_point(point: str, mode: str, backend: str) -> tuple[World, Outcome]:
    world = World(point, mode)
    registry = world.registry()
    call = ToolExecutionInput(
        call_id="call-1", name="probe", arguments={}, agent="agent", signal=world.source.signal
    )
    # Warm the worker-thread pool, so its idle worker is counted before, not as a leak.
    await anyio.to_thread.run_sync(lambda: None)
    threads, tasks = threading.active_count(), _tasks(backend)
    returned: list[ToolExecutionResult] = []
    propagated = False
    with anyio.fail_after(3):
        async with anyio.create_task_group() as group:
            scope = anyio.CancelScope()

            async def caller() -> None:
                nonlocal propagated
                with scope:
                    try:
                        returned.append(await registry.execute(call))
                    except anyio.get_cancelled_exc_class():
                        propagated = True
                        world.log.append("execute ended")
                        raise
                    world.log.append("execute ended")
                    if mode == "native":
                        await anyio.sleep(1)  # the cancellation lands here at the latest
                        raise AssertionError("native cancellation was swallowed")
                if mode == "native":
                    assert scope.cancelled_caught

            async def host() -> None:
                await world.parked.wait()
                if mode == "signal":
                    world.source.cancel("host pressed stop")
                else:
                    scope.cancel()

            group.start_soon(caller)
            group.start_soon(host)
    assert threading.active_count() <= threads, "a thread outlived the call"
    assert _tasks(backend) == tasks, "a task outlived the call"
    # Both observers saw the one final result exactly once.
    [final] = world.observed["async"]
    assert world.observed["plain"] == [final]
    if returned:
        assert returned == [final]
    assert propagated != bool(returned)
    code = final.code if isinstance(final, ToolExecutionFailure) else None
    return world, Outcome(code, propagated, world.body_runs, bool(world.post_seen))


TALLY: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parked plugin stages get a grace period after the signal fires; keep it short."""
    monkeypatch.setattr(cancel, "CANCEL_GRACE_S", 0.05)


CELLS = [(point, mode) for point in POINTS for mode in MODES]


def test_the_table_covers_every_cell() -> None:
    assert set(EXPECTED) == set(CELLS)


@pytest.mark.anyio
@pytest.mark.parametrize(("point", "mode"), CELLS, ids=[f"{p}-{m}" for p, m in CELLS])
async def test_cancel_cell(point: str, mode: str, anyio_backend: str) -> None:
    expected = EXPECTED[point, mode]
    world, outcome = await run_point(point, mode, anyio_backend)
    wanted = Outcome(expected.code, expected.propagated, expected.body_runs, expected.post_ran)
    assert outcome == wanted, f"{point} x {mode}: got {outcome}, documented {wanted}"
    log = world.log
    end = log.index("execute ended")
    # Drained, not abandoned: the parked component and a started body finished their
    # finally: before execute returned or raised.
    if point != "body_thread":
        assert log.index(f"{point} finally") < end, log
    if expected.body_runs:
        assert log.index("body finally") < end, log
    # A parked observer finishes its work: it is shielded from native cancellation, and
    # the caller's signal does not bound it (only the caller's deadline would).
    if point == "observer":
        assert "observer done" in log, log
    TALLY[expected.code or "success"] += 1
    TALLY["propagated" if expected.propagated else "returned"] += 1
    TALLY["cells"] += 1


def test_zz_cancel_matrix_summary(capsys: pytest.CaptureFixture[str]) -> None:
    """Runs last in this module: one summary line of the cells that ran."""
    if not TALLY["cells"]:
        pytest.skip("no cancellation cell ran in this session (deselected)")
    codes = ", ".join(
        f"{code}={count}"
        for code, count in sorted(TALLY.items())
        if code not in {"cells", "propagated", "returned"}
    )
    with capsys.disabled():
        print(
            f"\ncancel matrix: {TALLY['cells']} cells (points x signal/native x backends), "
            f"{TALLY['returned']} returned a result, {TALLY['propagated']} propagated "
            f"native cancellation ({codes})"
        )
    assert TALLY["returned"] + TALLY["propagated"] == TALLY["cells"]


# --------------------------------------------------------------------------- the grace


@pytest.mark.anyio
async def test_a_cooperative_policy_settling_within_the_grace_keeps_its_decision() -> None:
    # B150 for an awaiting policy: a Deny that settles after the abort stays the Deny,
    # because a stage that answers within CANCEL_GRACE_S is not interrupted.
    source = CancelSource()
    ran: list[str] = []

    class Policy:
        @hookimpl
        async def dsh_tools_pre_execute(self, execution: Any) -> Any:
            await execution.signal.wait()
            await anyio.sleep(0.01)
            return Deny("stopped by the host")

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="probe",
            description="A probe tool.",
            parameters={},
            execute=lambda args, ctx: ran.append("body"),
        )
    )
    registry.add_plugin(Policy())
    with anyio.fail_after(2):
        async with anyio.create_task_group() as group:
            group.start_soon(_cancel_soon, source)
            result = await registry.execute(
                ToolExecutionInput(call_id="c", name="probe", signal=source.signal)
            )
    assert isinstance(result, ToolExecutionFailure)
    assert (result.code, result.error.message) == ("DENIED", "stopped by the host")
    assert ran == []


@pytest.mark.anyio
async def test_an_interrupted_post_execute_fails_closed_and_drops_unreviewed_contexts() -> None:
    # Interpretation: a post-execute listener that never decided cannot vouch for the
    # body's deferred contexts: the call ends ABORTED on the final path without them.
    source = CancelSource()

    def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.defer_context(ContextMessage(id="secret", content="unreviewed", source="t"))
        return "raw output"

    class Stuck:
        @hookimpl
        async def dsh_tools_post_execute(self) -> None:
            await anyio.sleep_forever()

    registry = ToolRegistry()
    registry.register(
        define_tool(name="probe", description="A probe tool.", parameters={}, execute=body)
    )
    registry.add_plugin(Stuck())
    with anyio.fail_after(2):
        async with anyio.create_task_group() as group:
            group.start_soon(_cancel_soon, source)
            result = await registry.execute(
                ToolExecutionInput(call_id="c", name="probe", signal=source.signal)
            )
    assert isinstance(result, ToolExecutionFailure)
    assert result.code == "ABORTED"
    assert result.additional_contexts == ()
    assert "raw output" not in result.text


@pytest.mark.anyio
async def test_a_fired_signal_does_not_cut_an_observer_short() -> None:
    # Before: an async observer still pending CANCEL_GRACE_S after the caller's signal
    # fired was interrupted, so under load an audit log missed cancelled calls.
    source = CancelSource()
    seen: list[str] = []

    class Slow:
        @hookimpl
        async def dsh_tools_result(self) -> None:
            await anyio.sleep(4 * cancel.CANCEL_GRACE_S)
            seen.append("slow")

    class Plain:
        @hookimpl
        def dsh_tools_result(self, result: ToolExecutionResult) -> None:
            seen.append("plain")

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="probe", description="A probe tool.", parameters={}, execute=lambda a, c: "ok"
        )
    )
    registry.add_plugin(Plain())
    registry.add_plugin(Slow())  # added last: observes first
    source.cancel("before the call")
    result = await registry.execute(
        ToolExecutionInput(call_id="c", name="probe", signal=source.signal)
    )
    assert isinstance(result, ToolExecutionFailure)
    assert result.code == "ABORTED_BEFORE_DISPATCH"
    assert seen == ["slow", "plain"]


@pytest.mark.anyio
async def test_an_interrupted_observer_is_logged_and_the_next_one_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[str] = []

    class Stuck:
        @hookimpl
        async def dsh_tools_result(self) -> None:
            await anyio.sleep_forever()

    class Plain:
        @hookimpl
        def dsh_tools_result(self, result: ToolExecutionResult) -> None:
            seen.append("plain")

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="probe", description="A probe tool.", parameters={}, execute=lambda a, c: "ok"
        )
    )
    registry.add_plugin(Plain())
    registry.add_plugin(Stuck())  # added last: observes first
    with anyio.move_on_after(0.05):
        result = await registry.execute(ToolExecutionInput(call_id="c", name="probe"))
    assert not result.is_error
    assert seen == ["plain"]
    assert "was interrupted at the deadline of the caller" in caplog.text


@pytest.mark.anyio
async def test_observers_are_bounded_by_the_callers_deadline_plus_the_grace() -> None:
    # Before: a hanging async observer kept even a fail_after caller pending forever
    # (observers are shielded). Now the shield ends at the caller's deadline + grace.
    class Stuck:
        @hookimpl
        async def dsh_tools_result(self) -> None:
            await anyio.sleep_forever()

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="probe", description="A probe tool.", parameters={}, execute=lambda a, c: "ok"
        )
    )
    registry.add_plugin(Stuck())
    started = time.monotonic()
    with anyio.move_on_after(0.05) as scope:
        await registry.execute(ToolExecutionInput(call_id="c", name="probe"))
        await anyio.sleep(1)
    assert scope.cancelled_caught
    assert time.monotonic() - started < 0.5


async def _cancel_soon(source: CancelSource) -> None:
    await anyio.sleep(0.02)
    source.cancel("host pressed stop")
