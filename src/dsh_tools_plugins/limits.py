"""Caps on how many calls run at once and how many a scope may make.

:class:`ConcurrencyLimit` is a ``dsh_tools_execute`` wrapper: a call takes a permit per
configured cap (its tool's, its agent's, the overall one) after approval and guards, holds
them while its body runs, and gives them back when it ends. Waiters are served first-in
first-out. Time spent waiting counts against the call's timeout (the deadlines of the
caller's signal and of an outer wrapper's, and the tool's ``timeout_ms``): a call whose
deadline passes in the queue ends ``TOOL_TIMEOUT``, one whose signal fires there ends
``ABORTED_BEFORE_DISPATCH``, and neither holds anything. Waiting goes through
:class:`dsh_tools.permits.Permits`, which blocks the calling thread under
``execute_sync`` instead of needing an event loop. The permits belong to the plugin
instance, so every plan the registry builds shares them. A wait is noted in the call's
decision record (``waited 3.2 ms for a permit``).

:class:`CallBudget` is a ``dsh_tools_pre_execute`` implementation: at most ``limit``
calls of the tools its glob matches per agent scope, optionally per sliding window of
``window_s`` seconds. The call over budget is denied with a reason the model can act on
(``limit of 5 web_fetch calls reached``) and the rule's name in the record's detail.
"""

from __future__ import annotations

import fnmatch
import math
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dsh_tools.cancel import NEVER_CANCELLED, CancelSignal, Deadline
from dsh_tools.errors import DefinitionError, ErrorCode
from dsh_tools.hookspecs import WrapperGenerator, hookimpl
from dsh_tools.lingering import watching
from dsh_tools.models import (
    Deny,
    ToolDefinition,
    ToolExecution,
    ToolExecutionResult,
    failure_result,
)
from dsh_tools.permits import Permits
from dsh_tools.tracing import note

from ._globs import by_glob

__all__ = ["CallBudget", "CallBudgets", "ConcurrencyLimit"]


def _cap(label: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DefinitionError(f"ConcurrencyLimit {label} must be an integer >= 1, got {value!r}")
    return value


class ConcurrencyLimit:
    """Caps calls in flight per tool, per agent scope and overall.

    :param per_tool: a cap every tool gets for itself, or ``{glob: cap}`` (an exact name
        wins, then the first matching glob); tools no glob matches are not capped per tool.
    :param per_agent: a cap for each agent id's calls together.
    :param overall: a cap for all calls this plugin sees together.

    Raises :class:`~dsh_tools.DefinitionError` for a cap that is not an integer >= 1.
    """

    def __init__(
        self,
        per_tool: int | Mapping[str, int] | None = None,
        *,
        per_agent: int | None = None,
        overall: int | None = None,
    ) -> None:
        if per_tool is None or isinstance(per_tool, Mapping):
            self.per_tool: dict[str, int] = {
                str(glob): _cap(f"per_tool[{glob!r}]", cap)
                for glob, cap in (per_tool or {}).items()
            }
        else:
            self.per_tool = {"*": _cap("per_tool", per_tool)}
        self.per_agent = None if per_agent is None else _cap("per_agent", per_agent)
        self.overall = None if overall is None else _cap("overall", overall)
        self._pools: dict[tuple[str, str | None], Permits] = {}
        self._routes: dict[tuple[str, str | None], tuple[Permits, ...]] = {}
        self._lock = threading.Lock()
        self._everyone = None if self.overall is None else Permits(self.overall)

    def tool_cap(self, name: str) -> int | None:
        """The per-tool cap of tool ``name`` (``None``: not capped per tool)."""
        return by_glob(self.per_tool, name)

    def serializes(self, name: str, agent: str | None) -> bool:
        """Whether calls of ``name`` by ``agent`` run one at a time (a cap of 1 applies);
        ``registry.execution_mode`` then says ``"exclusive"`` for them."""
        return any(pool.capacity == 1 for pool in self.pools(name, agent))

    def pools(self, name: str, agent: str | None) -> tuple[Permits, ...]:
        """The permit pools a call of ``name`` by ``agent`` takes, in the order it takes
        them (the same for every call, so two calls never wait on each other in a cycle)."""
        route = self._routes.get((name, agent))
        if route is not None:
            return route
        wanted: list[tuple[tuple[str, str | None], int]] = []
        cap = self.tool_cap(name)
        if cap is not None:
            wanted.append((("tool", name), cap))
        if self.per_agent is not None:
            wanted.append((("agent", agent), self.per_agent))
        pools = [self._pool(key, size) for key, size in wanted]
        if self._everyone is not None:
            pools.append(self._everyone)
        route = self._routes.setdefault((name, agent), tuple(pools))
        return route

    def _pool(self, key: tuple[str, str | None], size: int) -> Permits:
        pool = self._pools.get(key)
        if pool is None:
            with self._lock:
                pool = self._pools.setdefault(key, Permits(size))
        return pool

    @hookimpl(wrapper=True, trylast=True)
    def dsh_tools_execute(
        self, execution: ToolExecution, tool: ToolDefinition[Any] | None
    ) -> WrapperGenerator:
        dispatch = yield
        if tool is None:
            return dispatch  # an unknown tool runs no body
        pools = self.pools(execution.name, execution.agent)
        if not pools:
            return dispatch
        timeout_ms = tool.timeout_ms

        async def limited(signal: CancelSignal | None = None) -> ToolExecutionResult:
            taken: list[Permits] = []

            def release() -> None:
                for pool in reversed(taken):
                    pool.release()

            with watching() as lingering:
                try:
                    for pool in pools:
                        if not pool.try_acquire():
                            break
                        taken.append(pool)
                    else:
                        return await dispatch(signal)
                    entered = time.monotonic()
                    deadline = _deadline(execution.signal, signal, timeout_ms)
                    for pool in pools[len(taken) :]:
                        if not await pool.acquire(execution.signal, signal, deadline=deadline):
                            return _not_started(execution, signal, deadline)
                        taken.append(pool)
                    waited = time.monotonic() - entered
                    note("ConcurrencyLimit", f"waited {waited * 1000:.1f} ms for a permit")
                    if timeout_ms is not None:
                        remaining = max(timeout_ms - waited * 1000, 0.001)
                        signal = (signal or NEVER_CANCELLED).with_timeout(remaining)
                    return await dispatch(signal)
                finally:
                    # A body abandoned at its deadline keeps its permits until it returns.
                    lingering.then(release)

        return limited


def _deadline(
    caller: CancelSignal | None, passed: CancelSignal | None, timeout_ms: float | None
) -> Deadline | None:
    """The earliest deadline the call is under: the signals' and its tool's own."""
    deadlines = [signal.deadline for signal in (caller, passed) if signal is not None]
    if timeout_ms is not None:
        deadlines.append(Deadline.after(timeout_ms))
    present = [deadline for deadline in deadlines if deadline is not None]
    return min(present) if present else None


def _not_started(
    execution: ToolExecution, signal: CancelSignal | None, deadline: Deadline | None
) -> ToolExecutionResult:
    """A call that left the queue without a permit: cancelled, or out of time."""
    cancelled = any(s is not None and s.cancelled for s in (execution.signal, signal))
    if cancelled or deadline is None:
        note("ConcurrencyLimit", "cancelled while waiting for a permit")
        return failure_result(
            "tool call aborted before dispatch", ErrorCode.ABORTED_BEFORE_DISPATCH
        )
    note("ConcurrencyLimit", "timed out waiting for a permit")
    return failure_result(
        f'tool "{execution.name}" timed out after {deadline.budget_ms:g} ms '
        "(waiting for a concurrency slot)",
        ErrorCode.TOOL_TIMEOUT,
    )


class CallBudget:
    """At most ``limit`` calls of the tools ``tools`` matches, per agent scope.

    :param limit: how many calls each agent id may make (an integer >= 0).
    :param tools: a tool name or ``fnmatch`` glob (``"web_*"``).
    :param window_s: count only the calls of the last ``window_s`` seconds (``None``:
        the whole life of the plugin).
    :param name: the rule's name in decision records (default: ``budget <tools>``).

    A call counts when it reaches this plugin's pre-execute and is within budget (a dry
    run never counts). Raises :class:`~dsh_tools.DefinitionError` for a bad setting.
    """

    def __init__(
        self,
        limit: int,
        tools: str = "*",
        *,
        window_s: float | None = None,
        name: str | None = None,
    ) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise DefinitionError(f"CallBudget limit must be an integer >= 0, got {limit!r}")
        if not isinstance(tools, str) or not tools:
            raise DefinitionError(f"CallBudget tools must be a tool name or glob, got {tools!r}")
        if window_s is not None and (
            isinstance(window_s, bool)
            or not isinstance(window_s, (int, float))
            or not 0 < window_s < math.inf
        ):
            raise DefinitionError(
                f"CallBudget window_s must be a positive finite number, got {window_s!r}"
            )
        self.limit = limit
        self.tools = tools
        self.window_s = None if window_s is None else float(window_s)
        self.name = name or f"budget {tools}"
        self._spent: dict[str | None, deque[float]] = {}

    def spent(self, agent: str | None) -> int:
        """Calls ``agent`` made that count against the budget now."""
        with _SPENDING:
            return len(self._window(agent, time.monotonic()))

    def _window(self, agent: str | None, now: float) -> deque[float]:
        times = self._spent.setdefault(agent, deque())
        if self.window_s is not None:
            while times and times[0] <= now - self.window_s:
                times.popleft()
        return times

    def _over(self, execution: ToolExecution, now: float) -> Deny | None:
        """The denial of a call over this budget (``None``: within it); takes the lock."""
        if not fnmatch.fnmatchcase(execution.name, self.tools):
            return None
        if len(self._window(execution.agent, now)) < self.limit:
            return None
        per = "" if self.window_s is None else f" per {self.window_s:g} s"
        what = self.tools if self.tools == execution.name else f"{self.tools!r}"
        return Deny(
            f"limit of {self.limit} {what} calls{per} reached; "
            "do without this tool or ask the user",
            detail={"rule": self.name, "limit": self.limit, "tools": self.tools},
        )

    def _spend(self, execution: ToolExecution, now: float) -> None:
        if not execution.dry_run and fnmatch.fnmatchcase(execution.name, self.tools):
            self._window(execution.agent, now).append(now)

    @hookimpl
    def dsh_tools_pre_execute(self, execution: ToolExecution) -> Deny | None:
        return _decide((self,), execution)


class CallBudgets:
    """Several :class:`CallBudget` rules as one plugin (a rules file's ``[[budget]]``
    tables): a call over any of them is denied and counts against none."""

    def __init__(self, budgets: Iterable[CallBudget]) -> None:
        self.budgets = tuple(budgets)

    @hookimpl
    def dsh_tools_pre_execute(self, execution: ToolExecution) -> Deny | None:
        return _decide(self.budgets, execution)


_SPENDING = threading.Lock()


def _decide(budgets: Sequence[CallBudget], execution: ToolExecution) -> Deny | None:
    """The first budget the call is over, or ``None`` after counting it in each."""
    now = time.monotonic()
    with _SPENDING:
        for budget in budgets:
            denied = budget._over(execution, now)
            if denied is not None:
                return denied
        for budget in budgets:
            budget._spend(execution, now)
    return None


def configured_limits() -> ConcurrencyLimit | None:
    """The ``limits`` entry point: the ``[limits]`` table of the rules file named by
    ``$DSH_TOOLS_RULES`` (nothing when there is none)."""
    from ._rules.limit_tables import configured

    return configured().concurrency


def configured_budgets() -> CallBudgets | None:
    """The ``budgets`` entry point: the rules file's ``[[budget]]`` tables."""
    from ._rules.limit_tables import configured

    return configured().budgets
