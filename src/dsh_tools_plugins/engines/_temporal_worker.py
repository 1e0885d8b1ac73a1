"""The worker side of a tool call on Temporal: the activities that run it.

Each activity is one pass through the registry (``registry.execute``, ``registry.resume``,
or a look at a ticket). The activity's heartbeat carries the call's latest progress and
brings the engine's cancellation, which fires the call's signal; its attempt number
tells a retried call from a first one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta

from temporalio import activity

from dsh_tools import CancelSignal, CancelSource
from dsh_tools._registry import ToolRegistry

from ._calls import (
    Attempt,
    CallRequest,
    Json,
    LatestProgress,
    guard_retries,
    run_call,
    run_resume,
    temporal_call_id,
    ticket_state,
)
from ._waiting import EXECUTE, RESUME, TICKET_STATE

_DEFAULT_HEARTBEAT = timedelta(seconds=30)


class ToolActivities:
    """The three activities of a registry's tool calls; :func:`tool_activities` lists them."""

    def __init__(self, registry: ToolRegistry) -> None:
        guard_retries(registry)
        self.registry = registry

    @activity.defn(name=EXECUTE)
    async def execute(self, request: Json) -> Json:
        """Run one call through ``registry.execute``."""
        call = CallRequest.from_json(request)
        attempt, call_id = _identity()
        progress = LatestProgress(call_id)
        return await _supervised(
            lambda signal: run_call(
                self.registry,
                call,
                call_id=call_id,
                attempt=attempt,
                signal=signal,
                progress=progress,
            ),
            progress,
        )

    @activity.defn(name=RESUME)
    async def resume(self, request: Json) -> Json:
        """Resume an answered ticket's call through ``registry.resume``, once."""
        attempt, call_id = _identity()
        progress = LatestProgress(call_id)
        return await _supervised(
            lambda signal: run_resume(
                self.registry,
                request["ticket"],
                attempt=attempt,
                signal=signal,
                timeout_s=request.get("timeout_s"),
                progress=progress,
            ),
            progress,
        )

    @activity.defn(name=TICKET_STATE)
    async def ticket_state(self, ticket: str) -> str:
        """The ticket's state in the registry's approval store (read off the event loop)."""
        return await asyncio.to_thread(ticket_state, self.registry, ticket)


def _identity() -> tuple[Attempt, str]:
    info = activity.info()
    call_id = temporal_call_id(info.workflow_id or "", info.workflow_run_id or "", info.activity_id)
    return Attempt("temporal", info.attempt), call_id


async def _supervised(
    run: Callable[[CancelSignal], Awaitable[Json]], progress: LatestProgress
) -> Json:
    """``run`` under a signal the activity's cancellation fires, heartbeating meanwhile.

    The call runs in a task of its own, so the engine's cancellation reaches it as its
    signal (the call ends ``ABORTED`` and that result is returned), never as a native
    cancellation of the call itself; a worker shutting down lets it propagate instead,
    so the engine retries the attempt."""
    source = CancelSource()
    call = asyncio.ensure_future(run(source.signal))
    beating = asyncio.ensure_future(_heartbeats(progress))
    try:
        while True:
            try:
                return await asyncio.shield(call)
            except asyncio.CancelledError:
                source.cancel("the activity was cancelled")
                if activity.is_worker_shutdown():
                    raise
    finally:
        beating.cancel()


async def _heartbeats(progress: LatestProgress) -> None:
    """Heartbeat every third of the heartbeat timeout, with the latest progress."""
    every = (activity.info().heartbeat_timeout or _DEFAULT_HEARTBEAT).total_seconds() / 3
    while True:
        latest = progress.latest
        if latest is None:
            activity.heartbeat()
        else:
            activity.heartbeat(latest)
        await asyncio.sleep(every)
