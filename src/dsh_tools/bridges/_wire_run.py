"""Running one model turn's calls in the order that matters (:func:`execute_calls`).

:mod:`dsh_tools.bridges.wire` is the public import path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import anyio

from .._models import ToolExecutionInput, ToolExecutionResult

if TYPE_CHECKING:
    from .._registry import ToolRegistry, ToolScope


async def execute_calls(
    registry: ToolRegistry | ToolScope,
    calls: Sequence[ToolExecutionInput],
    *,
    max_concurrency: int | None = None,
) -> list[ToolExecutionResult]:
    """Run one model turn's calls; one result per call, in the calls' order.

    Calls whose ``registry.execution_mode(call)`` is ``"parallel"`` run concurrently with
    their parallel neighbours; an ``"exclusive"`` call runs alone, after every call before
    it and before every call after it, so the model's order holds wherever it matters. A
    call with :class:`~dsh_tools.UnreadableArguments` passes the pipeline like any other
    and ends ``INVALID_JSON``. ``max_concurrency`` caps how many of the turn's calls run
    at once (the others wait their turn, in order); ``ValueError`` unless it is ``None`` or
    an integer >= 1.
    """
    if max_concurrency is not None and (
        isinstance(max_concurrency, bool)
        or not isinstance(max_concurrency, int)
        or max_concurrency < 1
    ):
        raise ValueError(f"max_concurrency must be an integer >= 1, got {max_concurrency!r}")
    results: dict[int, ToolExecutionResult] = {}
    batch: list[tuple[int, ToolExecutionInput]] = []
    limiter = None if max_concurrency is None else anyio.CapacityLimiter(max_concurrency)

    async def run(index: int, call: ToolExecutionInput) -> None:
        if limiter is None:
            results[index] = await registry.execute(call)
            return
        async with limiter:
            results[index] = await registry.execute(call)

    async def run_batch() -> None:
        if len(batch) > 1:
            async with anyio.create_task_group() as group:
                for index, call in batch:
                    group.start_soon(run, index, call)
        elif batch:
            await run(*batch[0])
        batch.clear()

    for index, call in enumerate(calls):
        if registry.execution_mode(call) == "parallel":
            batch.append((index, call))
        else:
            await run_batch()
            await run(index, call)
    await run_batch()
    return [results[index] for index in range(len(calls))]


def execute_calls_sync(
    registry: ToolRegistry | ToolScope, calls: Sequence[ToolExecutionInput]
) -> list[ToolExecutionResult]:
    """:func:`execute_calls` for synchronous hosts: the calls run one after another."""
    return [registry.execute_sync(call) for call in calls]
