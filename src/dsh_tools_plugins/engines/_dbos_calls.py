"""Tool calls on DBOS: the steps that run them (one pass through the registry each) and the
two drivers a workflow calls, :func:`call_tool` (sync) and :func:`call_tool_async`.

A step is checkpointed when it returns, so DBOS replays a finished call's result when it
recovers a workflow. A step that was running when its process died runs again on
recovery: DBOS keeps no record of a started step, so only the call journal can tell that
attempt from a first one (the call's id, :func:`dbos_call_id`, is the same both times).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from dbos import DBOS, StepOptions

from dsh_tools import ToolRegistry
from dsh_tools._numbers import positive_finite

from ._calls import (
    Attempt,
    CallRequest,
    Json,
    LatestProgress,
    Step,
    dbos_call_id,
    run_call,
    run_call_sync,
    run_resume,
    run_resume_sync,
    ticket_state,
)
from ._dbos_watch import WATCHER
from ._waiting import (
    ANSWERED,
    EXECUTE,
    RESUME,
    TICKET_STATE,
    WAITING,
    Waiting,
    request,
    steps,
)

_DBOS = Attempt("dbos")
_served: dict[str, Any] = {}
_STEP_NAMES = {"execute": EXECUTE, "resume": RESUME, "state": TICKET_STATE}


def serve_tools(registry: ToolRegistry, *, watch_s: float = 1.0) -> None:
    """Run this process's tool-call steps on ``registry`` (call before ``DBOS.launch()``,
    in every process that runs or recovers workflows). While calls run, every
    ``watch_s`` seconds this process's watcher thread looks whether each call's workflow
    was cancelled (then the call's signal fires) and publishes its latest progress as the
    workflow event ``dsh_tools.progress``."""
    if not positive_finite(watch_s):
        raise ValueError(
            f"serve_tools: watch_s must be a positive finite number of seconds, got {watch_s!r}"
        )
    _served.update(registry=registry)
    WATCHER.every = watch_s


def _registry() -> ToolRegistry:
    registry = _served.get("registry")
    if registry is None:
        raise RuntimeError(
            "no registry serves tool calls in this process: call "
            "dsh_tools_plugins.engines.dbos.serve_tools(registry) before DBOS.launch()"
        )
    return registry  # type: ignore[no-any-return]


def _identity() -> tuple[str, str]:
    workflow_id, step_id = DBOS.workflow_id, DBOS.step_id
    if workflow_id is None or step_id is None:
        raise RuntimeError("a tool call's step runs inside a DBOS workflow")
    return workflow_id, dbos_call_id(workflow_id, step_id)


async def _execute(call: Json) -> Json:
    workflow_id, call_id = _identity()
    progress = LatestProgress(call_id)
    with WATCHER.watching(workflow_id, progress) as signal:
        request = CallRequest.from_json(call)
        return await run_call(
            _registry(), request, call_id=call_id, attempt=_DBOS, signal=signal, progress=progress
        )


def _execute_sync(call: Json) -> Json:
    workflow_id, call_id = _identity()
    progress = LatestProgress(call_id)
    with WATCHER.watching(workflow_id, progress) as signal:
        step = Step(call_id, _DBOS, signal, progress)
        return run_call_sync(_registry(), CallRequest.from_json(call), step)


async def _resume(call: Json) -> Json:
    workflow_id, call_id = _identity()
    progress = LatestProgress(call_id)
    with WATCHER.watching(workflow_id, progress) as signal:
        return await run_resume(
            _registry(), call["ticket"], attempt=_DBOS, signal=signal,
            timeout_s=call.get("timeout_s"), progress=progress,
        )  # fmt: skip


def _resume_sync(call: Json) -> Json:
    workflow_id, call_id = _identity()
    progress = LatestProgress(call_id)
    with WATCHER.watching(workflow_id, progress) as signal:
        step = Step(call_id, _DBOS, signal, progress)
        return run_resume_sync(_registry(), call["ticket"], step, call.get("timeout_s"))


async def _state(ticket: str) -> str:
    return await asyncio.to_thread(ticket_state, _registry(), ticket)


def _state_sync(ticket: str) -> str:
    return ticket_state(_registry(), ticket)


_STEPS: dict[str, Callable[[Any], Awaitable[Any]]] = {
    "execute": _execute,
    "resume": _resume,
    "state": _state,
}
_SYNC_STEPS: dict[str, Callable[[Any], Any]] = {
    "execute": _execute_sync,
    "resume": _resume_sync,
    "state": _state_sync,
}
"""The steps of the sync driver: they run on the workflow's thread, as a bare step does,
not on DBOS's background loop (a hop to it and two to its threads per step)."""


def call_tool(
    name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    agent: str | None = None,
    timeout_s: float | None = None,
    waiting: Waiting = WAITING,
) -> dict[str, Any]:
    """Run one tool call from a (synchronous) DBOS workflow and return its result as
    JSON (``result_to_json``'s form). See :func:`call_tool_async`."""
    run = steps(request(name, arguments, agent, timeout_s), waiting)
    outcome: Any = None
    try:
        while True:
            kind, argument = run.send(outcome)
            if kind == "wait":
                ticket, seconds = argument
                outcome = DBOS.recv(f"{ANSWERED}.{ticket}", timeout_seconds=seconds)
            else:
                outcome = DBOS.run_step(_options(kind), _SYNC_STEPS[kind], argument)
    except StopIteration as done:
        result: dict[str, Any] = done.value
        return result


async def call_tool_async(
    name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    agent: str | None = None,
    timeout_s: float | None = None,
    waiting: Waiting = WAITING,
) -> dict[str, Any]:
    """Run one tool call from an ``async`` DBOS workflow and return its result as JSON
    (``result_to_json``'s form: ``isError``, ``content``, ``value`` or ``error``, ...).

    The call runs as the step ``dsh_tools.execute`` (the five stages); ``timeout_s`` is
    its time budget (``TOOL_TIMEOUT``). Cancelling the workflow fires the running call's
    signal (the observers see it ``ABORTED``; DBOS ends the workflow cancelled).

    A call that waits for a person (``APPROVAL_PENDING``) waits here, durably (DBOS's
    ``recv``: no process needs to be up meanwhile), looking at its ticket as ``waiting``
    says, or at once on a message to the topic ``dsh_tools.ticket_answered.<ticket>``
    (``DBOS.send``); once the ticket is answered, from whichever channel, its call is
    resumed (the step ``dsh_tools.resume``): at most once per ticket.
    """
    run = steps(request(name, arguments, agent, timeout_s), waiting)
    outcome: Any = None
    try:
        while True:
            kind, argument = run.send(outcome)
            if kind == "wait":
                ticket, seconds = argument
                outcome = await DBOS.recv_async(f"{ANSWERED}.{ticket}", timeout_seconds=seconds)
            else:
                outcome = await DBOS.run_step_async(_options(kind), _STEPS[kind], argument)
    except StopIteration as done:
        result: dict[str, Any] = done.value
        return result


def _options(kind: str) -> StepOptions:
    return {"name": _STEP_NAMES[kind]}
