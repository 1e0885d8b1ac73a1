"""Per-tool time budgets a host configures, for tools that declare no ``timeout_ms``.

The pipeline already enforces a definition's own ``timeout_ms`` and the registry's
``default_timeout_ms``. :class:`TimeoutPolicy` adds budgets by tool-name glob (and an
optional default), as a ``dsh_tools_execute`` wrapper::

    registry.add_plugin(TimeoutPolicy(default_ms=30_000, per_tool={"web_*": 10_000}))

How a budget works: the wrapper hands the inner dispatch its signal with a deadline
(``signal.with_timeout(budget)``), and the pipeline enforces that deadline where it runs
the body, exactly as it enforces ``timeout_ms``: at the deadline the body's signal fires
and the call fails with ``TOOL_TIMEOUT``. An ``async`` body is interrupted at its next
``await`` (and drained); a plain ``def`` body runs in a worker thread that is left to
finish, its late result discarded. A result that arrives before the deadline passes
through unchanged. The wrapper itself awaits nothing else, so it keeps ``execute_sync``
free of an event loop.

The policy reads the tool's definition from the hook's ``tool`` argument: a tool that
declares its own ``timeout_ms`` keeps it, and the policy needs no registry, so a
distribution can ship it through the ``dsh_tools.plugins`` entry point (the class itself,
or a zero-argument factory returning one with its budgets).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh_tools._cancel import NEVER_CANCELLED, CancelSignal
from dsh_tools._models import ToolDefinition, ToolExecution, ToolExecutionResult
from dsh_tools._numbers import positive_finite
from dsh_tools.errors import DefinitionError
from dsh_tools.hookspecs import WrapperGenerator, hookimpl

from ._globs import by_glob

__all__ = ["TimeoutPolicy"]


def _budget(label: str, value: object) -> float:
    if not positive_finite(value):
        raise DefinitionError(
            f"TimeoutPolicy {label} must be a positive finite number, got {value!r}"
        )
    return float(value)


class TimeoutPolicy:
    """Time budgets by tool-name glob for tools whose definition declares no ``timeout_ms``.

    :param default_ms: budget for calls no ``per_tool`` glob matches (``None``: no budget).
    :param per_tool: ``{glob: ms}``; an exact tool name wins, then the first matching glob
        in the mapping's order (``fnmatch`` syntax: ``*``, ``?``, ``[abc]``).

    Raises :class:`~dsh_tools.DefinitionError` for a budget that is not a positive
    finite number.
    """

    def __init__(
        self, default_ms: float | None = None, per_tool: Mapping[str, float] | None = None
    ) -> None:
        self.default_ms = None if default_ms is None else _budget("default_ms", default_ms)
        self.per_tool: dict[str, float] = {
            str(glob): _budget(f"per_tool[{glob!r}]", ms) for glob, ms in (per_tool or {}).items()
        }

    def budget_ms(self, name: str) -> float | None:
        """The budget for tool ``name`` by configuration alone (definitions not consulted)."""
        found = by_glob(self.per_tool, name)
        return self.default_ms if found is None else found

    @hookimpl(wrapper=True)
    def dsh_tools_execute(
        self, execution: ToolExecution, tool: ToolDefinition[Any] | None
    ) -> WrapperGenerator:
        dispatch = yield
        if tool is None or tool.timeout_ms is not None:
            return dispatch  # an unknown tool runs no body; a declared timeout wins
        budget = self.budget_ms(execution.name)
        if budget is None:
            return dispatch

        async def with_deadline(signal: CancelSignal | None = None) -> ToolExecutionResult:
            return await dispatch((signal or NEVER_CANCELLED).with_timeout(budget))

        return with_deadline
