"""Stage 3: the ``dsh_tools_execute`` wrappers around the body.

:func:`chain` is pluggy's protocol for ``wrapper=True`` implementations, minus pluggy's
per-call bookkeeping (it runs on every wrapped call): outermost first, each wrapper runs
to its ``yield``; then, innermost first, each gets the inner dispatch sent in (or the
error of the wrappers inside it thrown in) and returns the dispatch to use. A differential
test holds it to pluggy's own hook call. :func:`execute` is the stage: it builds the
chain around the body step, calls the outermost dispatch, and normalizes what it returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from .._cancel import CancelSignal
from .._models import (
    ToolExecutionFailure,
    ToolExecutionResult,
    ToolExecutionSuccess,
    failure_result,
)
from .._tracing import _WRAPPED
from ..errors import ErrorCode
from .body import run_body
from .call import Call, StageFailed, expire
from .loops import is_missing_loop, on_event_loop
from .plan import Impl
from .render import rerender
from .results import message


def chain(wrappers: Sequence[Impl], execution: Any, tool: Any, innermost: object) -> Any:
    """What the outermost of ``wrappers`` returns when ``innermost`` is what the hook's
    (trylast) implementation produced, as pluggy computes it; raises as pluggy raises."""
    started: list[tuple[Impl, Any]] = []
    error: BaseException | None = None
    for wrapper in wrappers:
        try:
            generator = wrapper.call(execution, tool)
            next(generator)
        except StopIteration:
            error = RuntimeError(f"execute wrapper {wrapper.label} did not yield")
            break
        except BaseException as raised:
            error = raised
            break
        started.append((wrapper, generator))
    result: Any = innermost
    while started:
        wrapper, generator = started.pop()
        try:
            if error is None:
                generator.send(result)
            else:
                generator.throw(error)
        except StopIteration as done:
            result, error = done.value, None
            continue
        except BaseException as raised:
            error = raised
            continue
        # A second yield: pluggy raises at once, and the outer wrappers never resume.
        generator.close()
        for _outer, outer in started:
            outer.close()
        raise RuntimeError(f"execute wrapper {wrapper.label} yielded twice")
    if error is not None:
        raise error
    return result


class _Pending:
    """Lets the caller's cancellation interrupt wrappers still pending (after the grace),
    once no body is running: a running body stops through its own signal, and is drained."""

    __slots__ = ("expire", "running", "signal")

    def __init__(self, scope: Any, signal: CancelSignal) -> None:
        self.expire = expire(scope)
        self.signal = signal
        self.running = 0

    def interrupt(self) -> None:
        if not self.running:
            self.expire()

    def body_done(self) -> None:
        self.running -= 1
        if self.signal.cancelled:
            self.interrupt()


async def execute(call: Call) -> ToolExecutionResult:
    """Stage 3: the wrappers' dispatch around the body. A wrapper that raises (or returns
    something that is not a result) fails the call closed on the final path."""
    wrappers, execution, tool, signal = call.plan.wrappers, call.execution, call.tool, call.signal
    produced: list[ToolExecutionResult] = []
    pending: _Pending | None = None

    async def innermost(replacement: CancelSignal | None = None) -> ToolExecutionResult:
        """The body end of the chain; what it returns a wrapper may pass on unchanged."""
        if pending is not None:
            pending.running += 1
        try:
            result = await run_body(call, replacement)
        finally:
            if pending is not None:
                pending.body_done()
        produced.append(result)
        return result

    noted = _WRAPPED.set(call if call.plan.traced else None)
    try:
        if signal is None or not on_event_loop():
            # Nobody can cancel this call, or nothing can be pending: no scope is needed.
            result: object = await chain(wrappers, execution, tool, innermost)(None)
        else:
            import anyio

            with anyio.CancelScope() as scope:
                pending = _Pending(scope, signal)
                remove = signal.add_callback(pending.interrupt)
                try:
                    result = await chain(wrappers, execution, tool, innermost)(None)
                finally:
                    remove()
            if scope.cancelled_caught:
                # A wrapper was still pending when the caller cancelled: aborted, post path.
                return call.aborted()
    except BaseException as error:
        raise StageFailed(_failure(call, error)) from None
    finally:
        _WRAPPED.reset(noted)
    for body_result in produced:
        if result is body_result:
            return body_result
    return _authored(call, result)


def _authored(call: Call, result: object) -> ToolExecutionResult:
    """Normalize a result a wrapper made itself (not one the body produced)."""
    if isinstance(result, ToolExecutionFailure):
        return result
    if not isinstance(result, ToolExecutionSuccess):
        raise StageFailed(
            failure_result(
                f"execute wrapper returned {type(result).__qualname__}; "
                "expected ToolExecutionSuccess or ToolExecutionFailure",
                ErrorCode.POLICY_ERROR,
            )
        )
    rendered = rerender(call, result.value)
    return attrs.evolve(
        rendered,
        meta=_kept_meta(rendered.meta, result.meta),
        additional_contexts=result.additional_contexts,
    )


def _kept_meta(contract: object, authored: object) -> object:
    """The meta of an authored success: the output contract's, plus the keys of the
    wrapper's own meta object that the contract's does not set (``{"cache": "hit"}``)."""
    if not isinstance(authored, dict) or not authored:
        return contract
    if contract is None:
        return authored
    if isinstance(contract, dict):
        return {**authored, **contract}
    return contract


def _failure(call: Call, error: BaseException) -> ToolExecutionFailure:
    """The failure of a raising wrapper, naming it when its code is in the traceback."""
    culprit = _culprit(error, call.plan.wrappers)
    named = "execute wrapper" if culprit is None else f"execute wrapper {culprit.label}"
    if is_missing_loop(error):  # a RuntimeError: never the caller's
        return failure_result(
            f"{named} awaited an event loop, and execute_sync runs this call without one "
            f"({message(error)}); use `await registry.execute(call)` for this call",
            ErrorCode.POLICY_ERROR,
        )
    return call.contained(error, ErrorCode.POLICY_ERROR, f"{named} failed: ")


def _culprit(error: BaseException, wrappers: Sequence[Impl]) -> Impl | None:
    """The wrapper whose code ran last before ``error`` was raised."""
    found = None
    traceback = error.__traceback__
    while traceback is not None:
        code = traceback.tb_frame.f_code
        for wrapper in wrappers:
            if code in wrapper.codes:
                found = wrapper
        traceback = traceback.tb_next
    return found
