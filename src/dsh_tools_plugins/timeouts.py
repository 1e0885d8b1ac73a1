"""Per-tool time budgets a host configures, for tools that declare no ``timeout_ms``.

The pipeline already enforces a definition's own ``timeout_ms`` and the registry's
``default_timeout_ms``. :class:`TimeoutPolicy` adds budgets by tool-name glob (and an
optional default), as a ``dsh_tools_execute`` wrapper::

    registry.add_plugin(
        TimeoutPolicy(default_ms=30_000, per_tool={"web_*": 10_000}, registry=registry)
    )

How a deadline works: the wrapper passes a replacement :class:`~dsh_tools.CancelSignal`
to the inner dispatch (linked to any signal an outer wrapper passed in) and cancels it
when the budget runs out. An ``async`` body is interrupted at its next ``await``; a sync
body marked ``blocking=True`` runs in a worker thread and must poll
``context.signal.cancelled`` to stop. The wrapper always awaits the inner dispatch to its
end, so a started body is never left running unreported: its result (``ABORTED`` because
the signal fired) is replaced by a ``TOOL_TIMEOUT`` failure. A result that arrives before
the deadline passes through unchanged.

Without a ``registry`` the policy cannot see definitions, so it applies its budgets to
every matching call; the definition's own ``timeout_ms`` still runs inside it, and the
shorter budget wins.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import anyio

from dsh_tools.cancel import CancelSignal, CancelSource, linked_source
from dsh_tools.errors import DefinitionError, ErrorCode
from dsh_tools.hookspecs import WrapperGenerator, hookimpl
from dsh_tools.models import (
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionResult,
    failure_result,
)

if TYPE_CHECKING:
    from dsh_tools.registry import ToolRegistry, ToolScope

__all__ = ["TimeoutPolicy"]

_DEADLINE = "dsh_tools_plugins.timeouts: deadline"
"""The reason the policy gives its replacement signal when the budget runs out."""

# Results that mean "the body stopped because the signal fired" (or raised while
# stopping); after our deadline they become TOOL_TIMEOUT. Anything else is kept.
_STOPPED = frozenset({ErrorCode.ABORTED.value, ErrorCode.TOOL_ERROR.value})


def _budget(label: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise DefinitionError(
            f"TimeoutPolicy {label} must be a positive finite number, got {value!r}"
        )
    return float(value)


class TimeoutPolicy:
    """Time budgets by tool-name glob for tools whose definition declares no ``timeout_ms``.

    :param default_ms: budget for calls no ``per_tool`` glob matches (``None``: no budget).
    :param per_tool: ``{glob: ms}``; an exact tool name wins, then the first matching glob
        in the mapping's order (``fnmatch`` syntax: ``*``, ``?``, ``[abc]``).
    :param registry: the registry (or scope) the policy is added to; used to skip tools
        whose definition declares its own ``timeout_ms``.

    Raises :class:`~dsh_tools.DefinitionError` for a budget that is not a positive
    finite number.
    """

    def __init__(
        self,
        default_ms: float | None = None,
        per_tool: Mapping[str, float] | None = None,
        *,
        registry: ToolRegistry | ToolScope | None = None,
    ) -> None:
        self.default_ms = None if default_ms is None else _budget("default_ms", default_ms)
        self.per_tool: dict[str, float] = {
            str(glob): _budget(f"per_tool[{glob!r}]", ms) for glob, ms in (per_tool or {}).items()
        }
        self._registry = registry

    def budget_ms(self, name: str) -> float | None:
        """The budget for tool ``name`` by configuration alone (definitions not consulted)."""
        exact = self.per_tool.get(name)
        if exact is not None:
            return exact
        for glob, ms in self.per_tool.items():
            if fnmatch.fnmatchcase(name, glob):
                return ms
        return self.default_ms

    def _budget_for(self, execution: ToolExecution) -> float | None:
        budget = self.budget_ms(execution.name)
        if budget is None or self._registry is None:
            return budget
        definition = self._registry.definition_for(execution.name, execution.agent)
        if definition is None or definition.timeout_ms is not None:
            return None
        return budget

    @hookimpl(wrapper=True)
    def dsh_tools_execute(self, execution: ToolExecution) -> WrapperGenerator:
        dispatch = yield
        budget = self._budget_for(execution)
        if budget is None:
            return dispatch

        async def with_deadline(signal: CancelSignal | None = None) -> ToolExecutionResult:
            if signal is None:
                source, unlink = CancelSource(), _nothing
            else:
                source, unlink = linked_source(signal)
            expired = False

            async def watchdog() -> None:
                nonlocal expired
                await anyio.sleep(budget / 1000)
                if not source.cancelled:
                    expired = True
                    source.cancel(_DEADLINE)

            try:
                async with anyio.create_task_group() as group:
                    group.start_soon(watchdog)
                    try:
                        result = await dispatch(source.signal)
                    finally:
                        group.cancel_scope.cancel()
            finally:
                unlink()
            if expired and isinstance(result, ToolExecutionFailure) and result.code in _STOPPED:
                return failure_result(
                    f'tool "{execution.name}" timed out after {budget:g} ms',
                    ErrorCode.TOOL_TIMEOUT,
                    contexts=result.additional_contexts,
                )
            return result

        return with_deadline


def _nothing() -> None:
    return None
