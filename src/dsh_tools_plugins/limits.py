"""Caps on how many calls run at once and how many a scope may make, per process or
shared by every process that uses one store.

:class:`ConcurrencyLimit` is a ``dsh_tools_execute`` wrapper: a call takes a permit per
configured cap (its tool's, its agent's, the overall one) after approval and guards, holds
them while its body runs, and gives them back when it ends. Waiters are served first-in
first-out. Time spent waiting counts against the call's timeout (the deadlines of the
caller's signal and of an outer wrapper's, and the tool's ``timeout_ms``, which starts when
the call begins waiting): a call whose deadline passes in the queue ends ``TOOL_TIMEOUT``,
one whose signal fires there ends ``ABORTED_BEFORE_DISPATCH``, and neither holds anything.
Waiting goes through :class:`dsh_tools._permits.Permits`, which blocks the calling thread
under ``execute_sync`` instead of needing an event loop. The permits belong to the plugin
instance, so every plan the registry builds shares them. A wait is noted in the call's
decision record (``waited 3.2 ms for a permit``).

:class:`CallBudget` is a ``tryfirst`` ``dsh_tools_pre_execute`` implementation: at most ``limit``
calls of the tools its glob matches per agent scope, optionally per sliding window of
``window_s`` seconds. The call over budget is denied with a reason the model can act on
(``limit of 5 web_fetch calls reached``) and the rule's name in the record's detail.

Both count per process unless given ``store=SharedLimits(...)``: then permits and spending
live in an approval store's database (SQLite for the processes of one machine, PostgreSQL
for several machines), and a permit is a row with an expiry its process renews, so a
killed process's permits come back within one lease. Per-agent caps and budgets count
every MCP client without a bearer token as one agent (:func:`account`).
"""

from __future__ import annotations

import fnmatch
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from dsh_tools._accounts import account
from dsh_tools._cancel import NEVER_CANCELLED, CancelSignal, Deadline
from dsh_tools._lingering import Lingering
from dsh_tools._models import (
    Deny,
    ToolDefinition,
    ToolExecution,
    ToolExecutionResult,
    failure_result,
)
from dsh_tools._numbers import positive_finite
from dsh_tools._permits import Permits, Retired
from dsh_tools._tracing import note
from dsh_tools.errors import DefinitionError, ErrorCode
from dsh_tools.hookspecs import WrapperGenerator, hookimpl

from ._globs import by_glob
from ._limits.shared import SharedLimits
from ._limits.spending import Spending
from ._stores.limit_rows import Spend

__all__ = ["CallBudget", "CallBudgets", "ConcurrencyLimit", "SharedLimits", "account"]

_SWEEP_FLOOR = 64
"""The fewest per-agent pools kept before a sweep drops the idle ones."""
_ROUTES_KEPT = 4096
"""The most routes (a tool and agent's pools) cached; more start the cache again."""


def _cap(label: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DefinitionError(f"ConcurrencyLimit {label} must be an integer >= 1, got {value!r}")
    return value


class ConcurrencyLimit:
    """Caps calls in flight per tool, per agent scope and overall.

    :param per_tool: a cap every tool gets for itself, or ``{glob: cap}`` (an exact name
        wins, then the first matching glob); tools no glob matches are not capped per tool.
    :param per_agent: a cap for each agent's calls together (every MCP client without a
        bearer token counts as one agent here: see :func:`account`).
    :param overall: a cap for all calls this plugin sees together.
    :param store: keep the permits in a shared store, so the caps hold across every
        process using it (``None``: in this process).

    Raises :class:`~dsh_tools.DefinitionError` for a cap that is not an integer >= 1.
    """

    def __init__(
        self,
        per_tool: int | Mapping[str, int] | None = None,
        *,
        per_agent: int | None = None,
        overall: int | None = None,
        store: SharedLimits | None = None,
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
        self.store = _shared(store, "ConcurrencyLimit")
        self._pools: dict[tuple[str, str | None], Permits] = {}
        self._routes: dict[tuple[str, str | None], tuple[Permits, ...]] = {}
        self._lock = threading.Lock()
        self._sweep_at = _SWEEP_FLOOR
        self._everyone = (
            None if self.overall is None else self._new(("overall", None), self.overall)
        )

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
        who = None if self.per_agent is None else account(agent)
        route = self._routes.get((name, who))
        if route is not None:
            return route
        wanted: list[tuple[tuple[str, str | None], int]] = []
        cap = self.tool_cap(name)
        if cap is not None:
            wanted.append((("tool", name), cap))
        if self.per_agent is not None:
            wanted.append((("agent", who), self.per_agent))
        pools = [self._pool(key, size) for key, size in wanted]
        if self._everyone is not None:
            pools.append(self._everyone)
        if len(self._routes) >= _ROUTES_KEPT:  # a cache: start it again
            self._routes = {}
        return self._routes.setdefault((name, who), tuple(pools))

    def _pool(self, key: tuple[str, str | None], size: int) -> Permits:
        pool = self._pools.get(key)
        if pool is None:
            with self._lock:
                pool = self._pools.get(key)
                if pool is None:
                    if len(self._pools) >= self._sweep_at:
                        self._sweep()
                    pool = self._pools[key] = self._new(key, size)
        return pool

    def _new(self, key: tuple[str, str | None], size: int) -> Permits:
        if self.store is None:
            return Permits(size)
        kind, name = key
        return self.store.permits(kind if name is None else f"{kind}:{name}", size)

    def _sweep(self) -> None:
        """Drop the per-agent pools nobody holds or waits for (under the lock): behind MCP
        over HTTP every client is an agent. A call that still reaches a dropped pool gets
        :class:`~dsh_tools._permits.Retired` and takes the route again."""
        for key, pool in list(self._pools.items()):
            if key[0] == "agent" and pool.retire():
                del self._pools[key]
        self._routes = {}
        self._sweep_at = max(_SWEEP_FLOOR, 2 * len(self._pools))

    @hookimpl(wrapper=True, trylast=True)
    def dsh_tools_execute(
        self, execution: ToolExecution, tool: ToolDefinition[Any] | None
    ) -> WrapperGenerator:
        dispatch = yield
        if tool is None:
            return dispatch  # an unknown tool runs no body
        route = self.pools(execution.name, execution.agent)
        if not route:
            return dispatch
        timeout_ms = tool.timeout_ms

        async def limited(signal: CancelSignal | None = None) -> ToolExecutionResult:
            taken: list[Permits] = []
            with Lingering() as lingering:
                try:
                    if _took_free(route, taken):
                        return await dispatch(signal)
                    entered = time.monotonic()
                    deadline = _deadline(execution.signal, signal, timeout_ms)
                    if not await self._wait(route, execution, signal, deadline, taken):
                        return _not_started(execution, signal, deadline)
                    waited = time.monotonic() - entered
                    note("ConcurrencyLimit", f"waited {waited * 1000:.1f} ms for a permit")
                    return await dispatch(_charged(signal, timeout_ms, waited))
                finally:
                    # A body abandoned at its deadline keeps its permits until it returns.
                    lingering.then(partial(_release, taken))

        return limited

    async def _wait(
        self,
        pools: tuple[Permits, ...],
        execution: ToolExecution,
        signal: CancelSignal | None,
        deadline: Deadline | None,
        taken: list[Permits],
    ) -> bool:
        """Wait for the permits of ``pools`` not yet ``taken``; ``False`` (``taken``
        given back) when the call's signal fires or its deadline passes first."""
        while True:
            try:
                for pool in pools[len(taken) :]:
                    if not await pool.acquire(execution.signal, signal, deadline=deadline):
                        return False
                    taken.append(pool)
                return True
            except Retired:  # a pool was dropped meanwhile: take the route again
                _release(taken)
                taken.clear()
                pools = self.pools(execution.name, execution.agent)


def _took_free(pools: tuple[Permits, ...], taken: list[Permits]) -> bool:
    """Take the free permits of ``pools`` in order, without waiting: whether it got them
    all (``taken`` holds those it got). A pool retired since the route was read has no
    free permit: the wait that follows takes the route again."""
    for pool in pools:
        if not pool.try_acquire():
            return False
        taken.append(pool)
    return True


def _release(taken: list[Permits]) -> None:
    for pool in reversed(taken):
        pool.release()


def _charged(
    signal: CancelSignal | None, timeout_ms: float | None, waited_s: float
) -> CancelSignal | None:
    """The signal a body runs under after waiting ``waited_s`` for its permits: the
    wait counts against the tool's ``timeout_ms``, which starts when the call began
    waiting, not when its body starts."""
    if timeout_ms is None:
        return signal
    remaining = max(timeout_ms - waited_s * 1000, 0.001)
    return (signal or NEVER_CANCELLED).with_timeout(remaining)


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

    :param limit: how many calls each agent may make (an integer >= 0; every MCP client
        without a bearer token counts as one agent here: see :func:`account`).
    :param tools: a tool name or ``fnmatch`` glob (``"web_*"``).
    :param window_s: count only the calls of the last ``window_s`` seconds (``None``:
        the whole life of the plugin, or of the shared store's rows).
    :param name: the rule's name in decision records (default: ``budget <tools>``); in
        a shared store, budgets of the same name, tools and window count together.
    :param store: count in a shared store, so the budget holds across every process
        using it (``None``: in this process).
    :param clock: the time (seconds, monotonic) a budget in this process counts by.

    A call counts when it reaches this plugin's pre-execute and is within budget (a dry
    run never counts). The hook is ``tryfirst``: pre-execute's first decision wins, so a
    budget must be heard before a policy that allows or asks (the permission rules),
    else it would never count, and a call over budget would still be put to a person.
    Raises :class:`~dsh_tools.DefinitionError` for a bad setting.
    """

    def __init__(
        self,
        limit: int,
        tools: str = "*",
        *,
        window_s: float | None = None,
        name: str | None = None,
        store: SharedLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise DefinitionError(f"CallBudget limit must be an integer >= 0, got {limit!r}")
        if not isinstance(tools, str) or not tools:
            raise DefinitionError(f"CallBudget tools must be a tool name or glob, got {tools!r}")
        if window_s is not None and not positive_finite(window_s):
            raise DefinitionError(
                f"CallBudget window_s must be a positive finite number, got {window_s!r}"
            )
        self.limit = limit
        self.tools = tools
        self.window_s = None if window_s is None else float(window_s)
        self.name = name or f"budget {tools}"
        self.store = _shared(store, "CallBudget")
        self._spending = Spending(self.window_s, clock)
        self._rule = json.dumps([self.name, self.tools, self.window_s])

    def spent(self, agent: str | None) -> int:
        """Calls ``agent`` made that count against the budget now (a shared budget's are
        read from its store)."""
        if self.store is not None:
            return self.store.spent(self._check(account(agent)))
        with _SPENDING:
            return self._spending.spent(account(agent), self._spending.clock())

    def _check(self, who: str | None) -> Spend:
        return Spend(self._rule, who or "", self.limit, self.window_s)

    def _denial(self, execution: ToolExecution, who: str | None) -> Deny:
        per = "" if self.window_s is None else f" per {self.window_s:g} s"
        what = self.tools if self.tools == execution.name else f"{self.tools!r}"
        detail: dict[str, object] = {"rule": self.name, "limit": self.limit, "tools": self.tools}
        if who != execution.agent:
            detail["account"] = who
        return Deny(
            f"limit of {self.limit} {what} calls{per} reached; "
            "do without this tool or ask the user",
            detail=detail,
        )

    @hookimpl(tryfirst=True)
    def dsh_tools_pre_execute(self, execution: ToolExecution) -> Decided:
        return _decide((self,), execution)


class CallBudgets:
    """Several :class:`CallBudget` rules as one plugin (a rules file's ``[[budget]]``
    tables): a call over any of them is denied and counts against none. Raises
    :class:`~dsh_tools.DefinitionError` when they are not all kept in one place."""

    def __init__(self, budgets: Iterable[CallBudget]) -> None:
        self.budgets = tuple(budgets)
        if len({id(budget.store) for budget in self.budgets}) > 1:
            raise DefinitionError("CallBudgets' budgets must all use one store (or none)")

    @hookimpl(tryfirst=True)
    def dsh_tools_pre_execute(self, execution: ToolExecution) -> Decided:
        return _decide(self.budgets, execution)


_SPENDING = threading.Lock()
Decided = Deny | None | Awaitable[Deny | None]


def _decide(budgets: Sequence[CallBudget], execution: ToolExecution) -> Decided:
    """The first budget the call is over, or ``None`` after counting it in each; for a
    shared store on an event loop, an awaitable of that."""
    matching = [budget for budget in budgets if fnmatch.fnmatchcase(execution.name, budget.tools)]
    if not matching:
        return None
    who = account(execution.agent)
    store = matching[0].store
    if store is not None:
        over = store.spend([budget._check(who) for budget in matching], execution.dry_run)
        if over is None or isinstance(over, int):
            return None if over is None else matching[over]._denial(execution, who)
        return _denied_later(matching, over, execution, who)
    with _SPENDING:
        for budget in matching:
            spending = budget._spending
            if spending.spent(who, spending.clock()) >= budget.limit:
                return budget._denial(execution, who)
        if not execution.dry_run:
            for budget in matching:
                budget._spending.add(who, budget._spending.clock())
    return None


async def _denied_later(
    budgets: Sequence[CallBudget],
    over: Awaitable[int | None],
    execution: ToolExecution,
    who: str | None,
) -> Deny | None:
    index = await over
    return None if index is None else budgets[index]._denial(execution, who)


def _shared(store: object, who: str) -> SharedLimits | None:
    if store is not None and not isinstance(store, SharedLimits):
        raise DefinitionError(
            f"{who} store must be a SharedLimits (or None), got {type(store).__qualname__}"
        )
    return store
