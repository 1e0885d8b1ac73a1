"""Fault injection: every pipeline stage, crossed with every way a plugin or tool can misbehave.

Each cell builds one registry in which every stage has a healthy implementation (a
pre-execute that asks, an approval service that allows once, a guard, a post-execute
listener, a result observer, an output-declaring tool with a finalizer) and replaces or
adds exactly one faulty component, then runs one call through it. The table ``EXPECTED``
is the documented outcome of each cell: the error code (``None`` for a success), the
stages the call went through (from :class:`~dsh_tools.testing.CallRecorder`), how many
times the body ran, and whether the caller's native cancellation propagates.

Faults: ``raise`` (an exception), ``base_exception`` (a ``BaseException`` that is no
``Exception``, as ``SystemExit`` or a library's own), ``wrong_type`` (a return value of
the wrong kind), ``hostile`` (an object equal to everything whose hash, repr, str and
truth value raise, returned in place of the answer),
``non_json`` (a value that is not lossless JSON), ``hang_signal`` (never finishes on its
own; the host cancels its :class:`~dsh_tools.CancelSource` after a short delay),
``hang_native`` (never finishes; the host's ``move_on_after`` cancels the task) and
``slow`` (a short sleep, then the healthy answer). Synchronous stages (guards, output
render and presentation_meta, finalize_content) cannot be interrupted: "hang" there
means blocking until the signal fires (a host thread cancels it while the call runs
under ``execute_sync``), or blocking past the caller's deadline.

Invariants checked in every cell: ``execute`` never raises except the caller's own
native cancellation; a failed or denied policy stage never lets the body run; the body,
once started, has finished its ``finally:`` before ``execute`` returns; both result
observers (one of them faulty in the observer cells) saw the one final result exactly
once; nothing hangs (every cell runs under ``fail_after``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import anyio
import attrs
import pytest

from dsh_tools import _cancel as cancel
from dsh_tools._cancel import CancelSignal, CancelSource
from dsh_tools._context import ToolRunContext
from dsh_tools._define import define_tool
from dsh_tools._models import (
    Accept,
    ApprovalRequest,
    Ask,
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolExecutionSuccess,
    ToolOutput,
)
from dsh_tools._registry import ToolRegistry
from dsh_tools.hookspecs import hookimpl
from dsh_tools.testing import CallRecorder
from strategies import AgreesWithEverything

STAGES = (
    "pre_execute",
    "approval",
    "guard",
    "wrapper_before",
    "wrapper_after",
    "body",
    "render",
    "presentation_meta",
    "post_execute",
    "finalize",
    "observer",
)
FAULTS = (
    "raise",
    "base_exception",
    "wrong_type",
    "hostile",
    "non_json",
    "hang_signal",
    "hang_native",
    "slow",
)

# Stages that are plain synchronous callables (no ``async def`` form exists).
SYNC_STAGES = frozenset({"guard", "render", "presentation_meta", "finalize"})

CANCEL_AFTER = 0.03
"""Seconds after which the host cancels a hanging call (signal or task)."""

TRACKED = ("pre_execute", "approval", "guard", "post_execute", "finalize", "result")

# --------------------------------------------------------------------------- expectations

FULL = ("pre_execute", "guard", "approval", "guard", "post_execute", "finalize", "result")
"""The path of an allowed call: every stage with a trace event. The guards run twice:
once as a dry run before the person is asked (a call they would deny is never put to
anyone), then for real after the answer."""

PRE_ONLY = ("pre_execute", "finalize", "result")
LOOKED = ("pre_execute", "guard", "finalize", "result")
TO_APPROVAL = ("pre_execute", "guard", "approval", "finalize", "result")
TO_GUARD = ("pre_execute", "guard", "approval", "guard", "finalize", "result")
NO_GUARD = ("pre_execute", "post_execute", "finalize", "result")
APPROVAL_POST = ("pre_execute", "guard", "approval", "post_execute", "finalize", "result")


@attrs.frozen
class Expect:
    """The documented outcome of one cell."""

    code: str | None
    """Error code of the result observers saw; ``None``: a success."""
    path: tuple[str, ...]
    """The tracked stages the call went through, in order."""
    body_runs: int
    """How many times the body started (and finished its ``finally:``)."""
    native: bool = False
    """The caller's native cancellation propagates out of ``execute``."""
    note: str = ""


OK = Expect(None, FULL, 1)

EXPECTED: dict[tuple[str, str], Expect] = {
    # pre-execute: a raising or malformed decision fails closed on the final path.
    ("pre_execute", "raise"): Expect("POLICY_ERROR", PRE_ONLY, 0),
    ("pre_execute", "base_exception"): Expect("POLICY_ERROR", PRE_ONLY, 0),
    ("pre_execute", "wrong_type"): Expect("POLICY_ERROR", PRE_ONLY, 0),
    ("pre_execute", "hostile"): Expect("POLICY_ERROR", PRE_ONLY, 0),
    ("pre_execute", "non_json"): Expect("POLICY_ERROR", PRE_ONLY, 0),
    # A pending pre-execute is interrupted when the caller's signal fires: no decision,
    # so guards are skipped; aborted before dispatch on the post path.
    ("pre_execute", "hang_signal"): Expect("ABORTED_BEFORE_DISPATCH", NO_GUARD, 0),
    ("pre_execute", "hang_native"): Expect(
        "ABORTED_BEFORE_DISPATCH", ("finalize", "result"), 0, native=True
    ),
    ("pre_execute", "slow"): OK,
    # approval service: fails closed like pre-execute; interrupted → aborted.
    ("approval", "raise"): Expect("POLICY_ERROR", TO_APPROVAL, 0),
    ("approval", "base_exception"): Expect("POLICY_ERROR", TO_APPROVAL, 0),
    ("approval", "wrong_type"): Expect("POLICY_ERROR", TO_APPROVAL, 0),
    ("approval", "hostile"): Expect(
        "POLICY_ERROR", TO_APPROVAL, 0, note="r09: only an outcome itself allows"
    ),
    ("approval", "non_json"): Expect("POLICY_ERROR", TO_APPROVAL, 0),
    ("approval", "hang_signal"): Expect("ABORTED_BEFORE_DISPATCH", APPROVAL_POST, 0),
    ("approval", "hang_native"): Expect("ABORTED_BEFORE_DISPATCH", LOOKED, 0, native=True),
    ("approval", "slow"): OK,
    # guards: anything but a string or None denies (fail closed), on the final path,
    # already in their dry run before the person would be asked: nobody is.
    ("guard", "raise"): Expect("DENIED", LOOKED, 0),
    ("guard", "base_exception"): Expect("DENIED", LOOKED, 0),
    ("guard", "wrong_type"): Expect("DENIED", LOOKED, 0),
    ("guard", "hostile"): Expect("DENIED", LOOKED, 0),
    ("guard", "non_json"): Expect("DENIED", LOOKED, 0),
    # The dry run blocks until the signal fires; the approval step then sees it.
    ("guard", "hang_signal"): Expect("ABORTED_BEFORE_DISPATCH", APPROVAL_POST, 0),
    ("guard", "hang_native"): Expect(
        "ABORTED",
        TO_GUARD,
        1,
        native=True,
        note="a sync guard cannot be interrupted; the def body starts in its worker "
        "thread, and the cancel lands when it returns",
    ),
    ("guard", "slow"): OK,
    # wrapper before calling dispatch: fails closed on the final path, body never runs.
    ("wrapper_before", "raise"): Expect("POLICY_ERROR", TO_GUARD, 0),
    ("wrapper_before", "base_exception"): Expect("POLICY_ERROR", TO_GUARD, 0),
    ("wrapper_before", "wrong_type"): Expect("POLICY_ERROR", TO_GUARD, 0),
    ("wrapper_before", "hostile"): Expect("POLICY_ERROR", TO_GUARD, 0),
    ("wrapper_before", "non_json"): Expect("POLICY_ERROR", TO_GUARD, 0),
    ("wrapper_before", "hang_signal"): Expect("ABORTED_BEFORE_DISPATCH", FULL, 0),
    ("wrapper_before", "hang_native"): Expect("ABORTED_BEFORE_DISPATCH", TO_GUARD, 0, True),
    ("wrapper_before", "slow"): OK,
    # wrapper after dispatch: the body ran once; the wrapper's failure wins, final path.
    ("wrapper_after", "raise"): Expect("POLICY_ERROR", TO_GUARD, 1),
    ("wrapper_after", "base_exception"): Expect("POLICY_ERROR", TO_GUARD, 1),
    ("wrapper_after", "wrong_type"): Expect("POLICY_ERROR", TO_GUARD, 1),
    ("wrapper_after", "hostile"): Expect("POLICY_ERROR", TO_GUARD, 1),
    ("wrapper_after", "non_json"): Expect(
        "POLICY_ERROR", TO_GUARD, 1, note="authoring a non-JSON success raises JsonValueError"
    ),
    ("wrapper_after", "hang_signal"): Expect("ABORTED", FULL, 1),
    ("wrapper_after", "hang_native"): Expect("ABORTED", TO_GUARD, 1, native=True),
    ("wrapper_after", "slow"): OK,
    # body: ordinary failures, on the post path.
    ("body", "raise"): Expect("TOOL_ERROR", FULL, 1),
    ("body", "base_exception"): Expect("TOOL_ERROR", FULL, 1),
    ("body", "wrong_type"): Expect("INVALID_TOOL_OUTPUT", FULL, 1),
    ("body", "hostile"): Expect("INVALID_TOOL_OUTPUT", FULL, 1),
    ("body", "non_json"): Expect("INVALID_TOOL_OUTPUT", FULL, 1),
    ("body", "hang_signal"): Expect("ABORTED", FULL, 1),
    ("body", "hang_native"): Expect("ABORTED", TO_GUARD, 1, native=True),
    ("body", "slow"): OK,
    # output.render: the value could not be rendered → INVALID_TOOL_OUTPUT, post path.
    ("render", "raise"): Expect("INVALID_TOOL_OUTPUT", FULL, 1),
    ("render", "base_exception"): Expect("INVALID_TOOL_OUTPUT", FULL, 1),
    ("render", "wrong_type"): Expect("INVALID_TOOL_OUTPUT", FULL, 1),
    ("render", "hostile"): Expect("INVALID_TOOL_OUTPUT", FULL, 1),
    ("render", "non_json"): Expect("INVALID_TOOL_OUTPUT", FULL, 1),
    ("render", "hang_signal"): Expect("ABORTED", FULL, 1),
    ("render", "hang_native"): Expect(None, FULL, 1, note="sync; the cancel lands after return"),
    ("render", "slow"): OK,
    # output.presentation_meta: like render; ``meta`` may be any JSON value, so a value
    # of an unexpected shape (a bare string) is not a fault at all.
    ("presentation_meta", "raise"): Expect("INVALID_TOOL_OUTPUT", FULL, 1),
    ("presentation_meta", "base_exception"): Expect("INVALID_TOOL_OUTPUT", FULL, 1),
    ("presentation_meta", "wrong_type"): Expect(None, FULL, 1, note="meta is any JSON value"),
    ("presentation_meta", "hostile"): Expect(
        "INVALID_TOOL_OUTPUT", FULL, 1, note="meta must be JSON"
    ),
    ("presentation_meta", "non_json"): Expect("INVALID_TOOL_OUTPUT", FULL, 1),
    ("presentation_meta", "hang_signal"): Expect("ABORTED", FULL, 1),
    ("presentation_meta", "hang_native"): Expect(None, FULL, 1, note="sync; cancel lands after"),
    ("presentation_meta", "slow"): OK,
    # post-execute: a raising or malformed listener fails closed on the final path; an
    # interrupted one is a policy stage that never decided: aborted, final path.
    ("post_execute", "raise"): Expect("POLICY_ERROR", FULL, 1),
    ("post_execute", "base_exception"): Expect("POLICY_ERROR", FULL, 1),
    ("post_execute", "wrong_type"): Expect("POLICY_ERROR", FULL, 1),
    ("post_execute", "hostile"): Expect("POLICY_ERROR", FULL, 1),
    ("post_execute", "non_json"): Expect(
        "POLICY_ERROR", FULL, 1, note="Accept(value=<non-JSON>) raises JsonValueError"
    ),
    ("post_execute", "hang_signal"): Expect("ABORTED", FULL, 1),
    ("post_execute", "hang_native"): Expect("ABORTED", TO_GUARD, 1, native=True),
    ("post_execute", "slow"): OK,
    # finalize_content: its failure replaces the whole result, once.
    ("finalize", "raise"): Expect("TOOL_ERROR", FULL, 1),
    ("finalize", "base_exception"): Expect("TOOL_ERROR", FULL, 1),
    ("finalize", "wrong_type"): Expect("INVALID_JSON", FULL, 1),
    ("finalize", "hostile"): Expect("INVALID_JSON", FULL, 1),
    ("finalize", "non_json"): Expect("INVALID_JSON", FULL, 1),
    ("finalize", "hang_signal"): Expect(
        None, FULL, 1, note="the outcome was settled before finalize; cancel changes nothing"
    ),
    ("finalize", "hang_native"): Expect(None, FULL, 1, note="sync; the cancel lands after"),
    ("finalize", "slow"): OK,
    # result observers: contained; the result is unaffected and the other observer
    # still sees it. Return values are ignored, so wrong_type / non_json are no faults.
    ("observer", "raise"): OK,
    ("observer", "base_exception"): OK,
    ("observer", "wrong_type"): Expect(None, FULL, 1, note="return values are ignored"),
    ("observer", "hostile"): Expect(None, FULL, 1, note="return values are ignored"),
    ("observer", "non_json"): Expect(None, FULL, 1, note="return values are ignored"),
    ("observer", "hang_signal"): Expect(
        None, FULL, 1, note="the signal does not bound observers; the caller's deadline does"
    ),
    ("observer", "hang_native"): Expect(
        None, FULL, 1, note="shielded until the caller's deadline plus a grace; cancel lands after"
    ),
    ("observer", "slow"): OK,
}

# --------------------------------------------------------------------------- the probe


class Escaped(BaseException):
    """A home-made ``BaseException`` (some libraries raise their own for control flow)."""


class Sandbox:
    """One cell's world: counters, the caller's signal, and how the host cancels."""

    def __init__(self, stage: str, fault: str) -> None:
        self.stage = stage
        self.fault = fault
        self.source = CancelSource()
        self.body_started = 0
        self.body_finished = 0
        self.observed: dict[str, list[ToolExecutionResult]] = {"healthy": [], "faulty": []}
        self.post_seen: list[ToolExecutionResult] = []
        self.hanging = threading.Event()
        """Set when the faulty stage starts to hang: a ``hang_signal`` host cancels then,
        not after a fixed delay that a loaded machine may reach before the stage does."""

    def faulty(self, stage: str) -> bool:
        return self.stage == stage

    def block_until_cancelled(self, signal: CancelSignal | None) -> None:
        """A synchronous hang: block until the caller's signal fires (or a safety limit)."""
        self.hanging.set()
        deadline = time.monotonic() + (2 if self.fault == "hang_signal" else 3 * CANCEL_AFTER)
        while time.monotonic() < deadline:
            if self.fault == "hang_signal" and signal is not None and signal.cancelled:
                return
            time.sleep(0.002)
        assert self.fault == "hang_native", "a synchronous hang was never cancelled"

    def cancel_once_hanging(self) -> None:
        """A host thread pressing stop once the faulty stage hangs (a second at most)."""
        self.hanging.wait(1)
        self.source.cancel("host pressed stop")

    def sync_fault(self, healthy: object, wrong: object, non_json: object, signal: Any) -> Any:
        """What a synchronous component returns (or does) for this cell's fault."""
        fault = self.fault
        if fault == "raise":
            raise RuntimeError(f"{self.stage} exploded")
        if fault == "base_exception":
            raise Escaped(f"{self.stage} escaped")
        if fault == "wrong_type":
            return wrong
        if fault == "hostile":
            return AgreesWithEverything()
        if fault == "non_json":
            return non_json
        if fault == "slow":
            time.sleep(0.005)
        else:
            self.block_until_cancelled(signal)
        return healthy

    async def async_fault(self, healthy: object, wrong: object, non_json: object) -> Any:
        """What an ``async`` component returns (or does) for this cell's fault."""
        fault = self.fault
        await anyio.lowlevel.checkpoint()
        if fault == "raise":
            raise RuntimeError(f"{self.stage} exploded")
        if fault == "base_exception":
            raise Escaped(f"{self.stage} escaped")
        if fault == "wrong_type":
            return wrong
        if fault == "hostile":
            return AgreesWithEverything()
        if fault == "non_json":
            return non_json
        if fault == "slow":
            await anyio.sleep(0.005)
            return healthy
        self.hanging.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ components

    def tool(self) -> Any:
        box = self

        def render(args: Any, value: Any) -> Any:
            if box.faulty("render"):
                return box.sync_fault(f"text={value['text']}", 42, [{1, 2}], box.source.signal)
            return f"text={value['text']}"

        def meta(args: Any, value: Any) -> Any:
            if box.faulty("presentation_meta"):
                return box.sync_fault({"chars": 2}, "a bare string", {"x": {1}}, box.source.signal)
            return {"chars": len(value["text"])}

        def finalize(execution: ToolExecution, result: ToolExecutionResult) -> Any:
            if box.faulty("finalize"):
                return box.sync_fault(None, 42, [{"type": "text", "text": b"x"}], execution.signal)
            return None

        async def async_body(args: Any, ctx: ToolRunContext) -> Any:
            box.body_started += 1
            try:
                return await box.async_fault({"text": args["text"]}, "a string", {"text": {1}})
            finally:
                box.body_finished += 1

        def sync_body(args: Any, ctx: ToolRunContext) -> Any:
            box.body_started += 1
            try:
                return {"text": args["text"]}
            finally:
                box.body_finished += 1

        return define_tool(
            name="probe",
            description="A probe tool.",
            parameters={"text": {"type": "string", "required": True}},
            execute=async_body if self.faulty("body") else sync_body,
            output=ToolOutput(
                schema={
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                },
                render=render,
                presentation_meta=meta,
            ),
            finalize_content=finalize,
        )

    def approval(self) -> Any:
        box = self

        class Healthy:
            def request(self, request: ApprovalRequest) -> str:
                return "allowed-once"

        class Faulty:
            async def request(self, request: ApprovalRequest) -> Any:
                return await box.async_fault("allowed-once", True, {1, 2})

        return Faulty() if self.faulty("approval") else Healthy()

    def plugins(self) -> Iterator[object]:
        """Healthy plugins first; the faulty one is added last, so it runs first."""
        box = self

        class HealthyPolicy:
            @hookimpl
            def dsh_tools_pre_execute(self) -> Ask:
                return Ask("a person reviews probes")

            @hookimpl
            def dsh_tools_post_execute(self, result: ToolExecutionResult) -> None:
                box.post_seen.append(result)

            @hookimpl
            def dsh_tools_result(self, result: ToolExecutionResult) -> None:
                box.observed["healthy"].append(result)

        yield HealthyPolicy()

        class FaultyPre:
            @hookimpl
            async def dsh_tools_pre_execute(self) -> Any:
                return await box.async_fault(None, "allow", {1, 2})

        class FaultyPost:
            @hookimpl
            async def dsh_tools_post_execute(self) -> Any:
                if box.fault == "non_json":
                    await anyio.lowlevel.checkpoint()
                    return Accept(value={"text": {1, 2}})
                return await box.async_fault(None, "keep it", None)

        class FaultyObserver:
            @hookimpl
            async def dsh_tools_result(self, result: ToolExecutionResult) -> Any:
                box.observed["faulty"].append(result)
                return await box.async_fault(None, 42, {1, 2})

        class FaultyWrapper:
            @hookimpl(wrapper=True)
            def dsh_tools_execute(self) -> Any:
                dispatch = yield
                if box.stage == "wrapper_before" and box.fault == "wrong_type":
                    return "not a dispatch"

                async def wrapped(signal: CancelSignal | None = None) -> Any:
                    if box.stage == "wrapper_before":
                        if box.fault == "non_json":
                            return {"value": {1, 2}}
                        if box.fault == "hostile":
                            return AgreesWithEverything()
                        await box.async_fault(None, None, None)
                        return await dispatch(signal)
                    result = await dispatch(signal)
                    if box.fault == "wrong_type":
                        return "done"
                    if box.fault == "hostile":
                        return AgreesWithEverything()
                    if box.fault == "non_json":
                        assert isinstance(result, ToolExecutionSuccess)
                        return attrs.evolve(result, value={"text": {1, 2}})
                    await box.async_fault(None, None, None)
                    return result

                return wrapped

        faulty: dict[str, type] = {
            "pre_execute": FaultyPre,
            "post_execute": FaultyPost,
            "observer": FaultyObserver,
            "wrapper_before": FaultyWrapper,
            "wrapper_after": FaultyWrapper,
        }
        if self.stage in faulty:
            yield faulty[self.stage]()
        if self.stage == "observer":
            return

        class SecondObserver:
            """Every cell has two observers; here both are healthy."""

            @hookimpl
            def dsh_tools_result(self, result: ToolExecutionResult) -> None:
                box.observed["faulty"].append(result)

        yield SecondObserver()

    def guard(self, execution: ToolExecution) -> Any:
        if self.faulty("guard"):
            return self.sync_fault(None, 42, b"bytes are not a reason", execution.signal)
        return None


@attrs.frozen
class Outcome:
    code: str | None
    path: tuple[str, ...]
    body_runs: int
    native: bool


def make_registry(box: Sandbox, recorder: CallRecorder) -> ToolRegistry:
    registry = ToolRegistry(approval=box.approval(), tracer=recorder)
    registry.register(box.tool())
    registry.guard(box.guard)
    for plugin in box.plugins():
        registry.add_plugin(plugin)
    return registry


def probe_call(box: Sandbox) -> ToolExecutionInput:
    return ToolExecutionInput(
        call_id="call-1",
        name="probe",
        arguments={"text": "hi"},
        agent="agent",
        signal=box.source.signal,
    )


OBSERVER_DEADLINE = 0.5
"""The caller's deadline in the ``hang_signal`` cells, which ends a hanging observer."""


async def run_cell(stage: str, fault: str) -> tuple[Sandbox, Outcome]:
    box = Sandbox(stage, fault)
    recorder = CallRecorder()
    registry = make_registry(box, recorder)
    call = probe_call(box)
    results: list[ToolExecutionResult] = []
    native = False
    with anyio.fail_after(2):
        if fault == "hang_signal" and stage in SYNC_STAGES:
            # The stage blocks the thread; the host cancels from another thread while
            # execute_sync drives the call (no event loop, nothing to wake).
            host = threading.Thread(target=box.cancel_once_hanging)
            host.start()
            try:
                results.append(await anyio.to_thread.run_sync(registry.execute_sync, call))
            finally:
                host.join()
        elif fault == "hang_signal":
            async with anyio.create_task_group() as group:

                async def cancel_later() -> None:
                    await anyio.to_thread.run_sync(box.hanging.wait, 1)
                    box.source.cancel("host pressed stop")  # on the loop, as a host would

                group.start_soon(cancel_later)
                # Only a result observer outlives the signal (it records the call, it does
                # not work for it): the caller's deadline, plus the grace, bounds it.
                with anyio.move_on_after(OBSERVER_DEADLINE):
                    results.append(await registry.execute(call))
        elif fault == "hang_native":
            with anyio.move_on_after(CANCEL_AFTER) as scope:
                try:
                    results.append(await registry.execute(call))
                except anyio.get_cancelled_exc_class():
                    native = True
                    raise
                # A synchronous call never checkpoints: the cancellation lands here.
                await anyio.sleep(1)
            assert scope.cancelled_caught
        else:
            results.append(await registry.execute(call))
    observed = box.observed["healthy"]
    assert len(observed) == 1, f"healthy observer saw {len(observed)} results"
    assert box.observed["faulty"] == observed, "the second observer saw something else"
    [final] = observed
    if results:
        assert results[0] is final, "execute returned another object than observers saw"
    assert native != bool(results)
    code = final.code if isinstance(final, ToolExecutionFailure) else None
    stages = [s for s in recorder.last.stages if s in TRACKED]
    path = tuple(s for i, s in enumerate(stages) if i == 0 or stages[i - 1] != s)
    return box, Outcome(code, path, box.body_started, native)


TALLY: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stages pending past a cancellation get a grace period; keep it short here."""
    monkeypatch.setattr(cancel, "CANCEL_GRACE_S", 0.05)


CELLS = [(stage, fault) for stage in STAGES for fault in FAULTS]


def test_the_table_covers_every_cell() -> None:
    assert set(EXPECTED) == set(CELLS)


@pytest.mark.anyio
@pytest.mark.parametrize(("stage", "fault"), CELLS, ids=[f"{s}-{f}" for s, f in CELLS])
async def test_fault_cell(stage: str, fault: str, anyio_backend: str) -> None:
    expected = EXPECTED[stage, fault]
    started = time.monotonic()
    box, outcome = await run_cell(stage, fault)
    wanted = Outcome(expected.code, expected.path, expected.body_runs, expected.native)
    assert outcome == wanted, f"{stage} x {fault}: got {outcome}, documented {wanted}"
    # A started body always finished (its finally: ran) before execute returned.
    assert box.body_finished == box.body_started
    # Fail closed: a policy stage that failed or denied never lets the body run.
    if expected.code in {"POLICY_ERROR", "DENIED", "ABORTED_BEFORE_DISPATCH"} and stage in {
        "pre_execute",
        "approval",
        "guard",
        "wrapper_before",
    }:
        assert box.body_started == 0
    # The healthy post-execute listener (it runs after a faulty one) saw the result
    # exactly when the call took the post path and no listener before it failed.
    post_ran = "post_execute" in expected.path
    if stage == "post_execute":
        post_ran = expected.code is None
    assert len(box.post_seen) == int(post_ran)
    assert time.monotonic() - started < 1.5
    TALLY["ok" if expected.code is None else "failure"] += 1
    TALLY[expected.code or "success"] += 1
    TALLY["cells"] += 1


def test_zz_fault_matrix_summary(capsys: pytest.CaptureFixture[str]) -> None:
    """Runs last in this module: one summary line of the cells that ran."""
    if not TALLY["cells"]:
        pytest.skip("no fault cell ran in this session (deselected)")
    codes = ", ".join(
        f"{code}={count}"
        for code, count in sorted(TALLY.items())
        if code not in {"ok", "failure", "cells"}
    )
    with capsys.disabled():
        print(
            f"\nfault matrix: {TALLY['cells']} cells (stage x fault x backend), {TALLY['ok']} ok, "
            f"{TALLY['failure']} failures as documented ({codes})"
        )
    assert TALLY["ok"] + TALLY["failure"] == TALLY["cells"]
