"""The views of a registry: what the registry itself and each of its scopes do alike,
and :class:`ToolScope`, an agent's view.

:class:`~dsh_tools._registry.ToolRegistry` (the global layer) and :class:`ToolScope` (an
agent's layer) share these operations: register and look up tools, guards and plugins
through the view, and run, resume or explain a call routed to the view's agent. The
registry holds the state they act on; a view reaches it through :class:`_State`, so this
module never imports the registry's (``dsh_tools._registry`` re-exports ``ToolScope``,
``Disposer`` and ``Guard`` from here).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from .._models import ToolDefinition, ToolExecution, ToolExecutionInput, ToolExecutionResult
from ..errors import RegistrationError
from . import drivers, explain
from .loops import drive, refuse_inside_a_loop, run_on_own_loop
from .tickets import resumed_call

if TYPE_CHECKING:
    from .._cancel import CancelSignal
    from .._models import PresentableResult, ToolSchema
    from ..approvals import ApprovalStore, ApprovalTicket
    from ..presentation._cards import ToolCallView, ToolResultView
    from ..progress import ProgressListener
    from ..records import Explanation
    from .call import Handle
    from .plan import Plan

SEPARATOR = "/"
"""Joins scope keys into an agent id (``"parent/child"``)."""

Disposer = Callable[[], None]
"""Undoes one registration; calling it again does nothing."""

Guard = Callable[[ToolExecution], "str | None"]
"""A final pre-dispatch check: return a reason string to deny, ``None`` to abstain."""


class _State(Protocol):
    """What a view acts on: the registry's layers, plugins and plans
    (:class:`~dsh_tools._registry.ToolRegistry` is the one implementation)."""

    _plans: dict[tuple[str, ...], Plan]
    _handle: Handle

    @property
    def approval_store(self) -> ApprovalStore: ...

    def _plan(self, path: tuple[str, ...]) -> Plan: ...

    def _register(self, path: tuple[str, ...], definition: ToolDefinition[Any]) -> Disposer: ...

    def _add_guard(self, path: tuple[str, ...], fn: Guard) -> Disposer: ...

    def _add_plugin(self, path: tuple[str, ...], plugin: object, name: str | None) -> Disposer: ...

    def _execution_mode(self, call: ToolExecutionInput) -> str: ...

    def _restrict(self, path: tuple[str, ...], allow: object, deny: object) -> Disposer: ...

    def _close(self, path: tuple[str, ...]) -> None: ...


class _ViewBase:
    """Operations shared by the registry (global layer) and its scopes."""

    _registry: _State
    _path: tuple[str, ...]

    @property
    def agent(self) -> str | None:
        """The agent id calls through this view carry (``None`` for the global layer)."""
        return SEPARATOR.join(self._path) if self._path else None

    def register(self, definition: ToolDefinition[Any]) -> Disposer:
        """Add a tool to this layer; returns a disposer that removes exactly this entry."""
        return self._registry._register(self._path, definition)

    def guard(self, fn: Guard) -> Disposer:
        """Add a guard that applies to calls of this layer's agent and its descendants."""
        return self._registry._add_guard(self._path, fn)

    def add_plugin(self, plugin: object, name: str | None = None) -> Disposer:
        """Add a pluggy plugin whose ``dsh_tools_*`` hooks see this layer's calls."""
        return self._registry._add_plugin(self._path, plugin, name)

    def get(self, name: str) -> ToolDefinition[Any] | None:
        """The definition a call by this view's agent would run, or ``None``."""
        entry = self._registry._plan(self._path).tools.get(name)
        return entry.definition if entry is not None else None

    def definition_for(self, name: str, agent: str | None = None) -> ToolDefinition[Any] | None:
        """The definition a call to ``name`` by ``agent`` would run, seen from this view.

        ``agent=None`` means this view's own agent. An agent outside this view (not this
        scope or one of its descendants), or a malformed agent id, sees nothing: ``None``.
        """
        try:
            path = self._path if agent is None else path_of(agent)
        except RegistrationError:
            return None
        if not _is_prefix(self._path, path):
            return None
        entry = self._registry._plan(path).tools.get(name)
        return entry.definition if entry is not None else None

    def names(self) -> list[str]:
        """Names of the visible tools, in :meth:`schemas` order."""
        return list(self._registry._plan(self._path).tools)

    def schemas(self) -> list[ToolSchema]:
        """The model-facing schemas of every visible tool: name, description, parameters.

        An explicit allowlist: callbacks, output declarations and timeouts never appear.
        ``parameters`` are deep-frozen, so a caller cannot change what the registry holds.
        """
        return [entry.schema for entry in self._registry._plan(self._path).tools.values()]

    def scope(self, key: str) -> ToolScope:
        """The child scope ``key`` (created on first use); scopes nest."""
        if not isinstance(key, str) or not key or SEPARATOR in key:
            raise RegistrationError(
                f"scope key must be a non-empty string without {SEPARATOR!r}, got {key!r}"
            )
        return ToolScope(self._registry, (*self._path, key))

    def present_call(self, call: ToolExecutionInput) -> ToolCallView:
        """The pending card for ``call`` as this view's agent sees the tool; never raises
        (a missing, failing or outdated presenter gives the generic fallback card)."""
        from ..presentation._presenting import present_call

        return present_call(self, call)

    def present_result(
        self, call: ToolExecutionInput, result: ToolExecutionResult | PresentableResult
    ) -> ToolResultView | None:
        """The completed card for ``call``, or ``None`` to show the raw content; never raises."""
        from ..presentation._presenting import present_result

        return present_result(self, call, result)

    def execution_mode(self, call: ToolExecutionInput) -> str:
        """``"parallel"`` only when the tool's ``is_concurrency_safe`` returns exactly
        ``True`` for these arguments and no execute wrapper runs its calls one at a time
        (a plugin whose ``serializes(name, agent)`` says ``True``, as ``ConcurrencyLimit``
        with a cap of 1); ``"exclusive"`` otherwise, failures included."""
        return self._registry._execution_mode(self._route(call))

    def execute(self, call: ToolExecutionInput) -> Awaitable[ToolExecutionResult]:
        """Run one call through the five stages; await it for the frozen result.

        Routing errors (a malformed agent id, a call for another scope) raise at once;
        everything that happens to the call itself ends in a result.
        """
        plan, routed = self._planned(call)
        return drivers.start(plan, self._registry._handle, routed)

    def execute_sync(self, call: ToolExecutionInput) -> ToolExecutionResult:
        """:meth:`execute` for synchronous hosts.

        The call runs the very same stages with no event loop and no thread whenever
        nothing in it needs one: sync hookimpls and approval service, a sync body, and
        execute wrappers whose dispatch does not await a loop (the first-party policies
        do not). An ``async def`` hookimpl, approval service or body makes the call run on
        an event loop of its own; a ``def`` body with a deadline runs in one worker
        thread. Raises :class:`RuntimeError` inside a running event loop.
        """
        refuse_inside_a_loop()
        plan, routed = self._planned(call)
        return drivers.execute_sync(plan, self._registry._handle, routed)

    def resume(
        self,
        ticket: ApprovalTicket | str,
        *,
        signal: CancelSignal | None = None,
        on_progress: ProgressListener | None = None,
    ) -> Awaitable[ToolExecutionResult]:
        """Run the call an approval ticket holds, on its frozen arguments, once.

        Pre-execute and the guards run again (a policy that denies now wins over the
        approval); the ticket's answer is then taken, atomically: the body runs at most
        once however many processes resume the ticket. The others, and a ticket still
        pending, expired, rejected or changed in the store, get a failure result saying
        so. Raises :class:`~dsh_tools.approvals.TicketError` for an unknown ticket, a
        store that cannot be read, or (through a scope) another agent's ticket.

        ``signal`` and ``on_progress`` are the resumed call's, as on
        :class:`~dsh_tools.ToolExecutionInput`: a host that resumes can still cancel the
        call, bound it with a deadline and hear its progress.
        """
        call, ticket_id = resumed_call(self._registry.approval_store, ticket, self.agent)
        call = _with_caller(call, signal, on_progress)
        plan, routed = self._planned(call)
        return drivers.start(plan, self._registry._handle, routed, ticket_id)

    def resume_sync(
        self,
        ticket: ApprovalTicket | str,
        *,
        signal: CancelSignal | None = None,
        on_progress: ProgressListener | None = None,
    ) -> ToolExecutionResult:
        """:meth:`resume` for synchronous hosts (no event loop unless the call needs one)."""
        refuse_inside_a_loop()
        call, ticket_id = resumed_call(self._registry.approval_store, ticket, self.agent)
        call = _with_caller(call, signal, on_progress)
        plan, routed = self._planned(call)
        return drivers.execute_sync(plan, self._registry._handle, routed, ticket_id)

    def explain(self, call: ToolExecutionInput) -> Explanation:
        """What would happen to ``call``, without running it: a policy dry run.

        Validates the arguments and runs pre-execute and the guards, as the call would
        see them through this view, but never the approval service, the wrappers, the
        body, post-execute or the result observers, and the plugins see
        ``execution.dry_run`` set. Returns an :class:`~dsh_tools.records.Explanation`:
        ``run``, ``deny`` (with the deciding plugin, its reason and, for permission
        rules, the rule), ``ask`` (with what an approval would lead to) or ``invalid``.
        An ``Ask`` whose answer the approval store remembers is decided by that answer,
        as the call would be (the store is read, never written).
        Raises :class:`RuntimeError` inside a running event loop (use
        :meth:`explain_async` there).
        """
        refuse_inside_a_loop()
        plan, routed = self._planned(call)
        run = explain.explain(plan, self._registry._handle, routed)
        return run_on_own_loop(run) if plan.needs_loop else drive(run)

    async def explain_async(self, call: ToolExecutionInput) -> Explanation:
        """:meth:`explain` for asynchronous hosts."""
        plan, routed = self._planned(call)
        return await explain.explain(plan, self._registry._handle, routed)

    def _planned(self, call: ToolExecutionInput) -> tuple[Plan, ToolExecutionInput]:
        """The plan that runs ``call``, and the call routed to this view's agent."""
        if not self._path and type(call) is ToolExecutionInput and call.agent is None:
            return self._registry._plans.get(()) or self._registry._plan(()), call  # usual
        routed = self._route(call)
        path = self._path or path_of(routed.agent)  # a scope's calls are routed to it
        return self._registry._plan(path), routed

    def _route(self, call: ToolExecutionInput) -> ToolExecutionInput:
        if not isinstance(call, ToolExecutionInput):
            raise TypeError(
                f"execute() expects a ToolExecutionInput, got {type(call).__qualname__}"
            )
        if not self._path:
            return call
        if call.agent is None:
            return _with_agent(call, self.agent)
        if call.agent != self.agent:
            raise RegistrationError(
                f"call {call.call_id!r} names agent {call.agent!r} but was executed through "
                f"scope {self.agent!r}; execute it through the registry or that agent's scope"
            )
        return call


class ToolScope(_ViewBase):
    """One agent's view of a registry: its own tools, guards, plugins and restrictions.

    Calls executed through a scope carry its agent id (``"parent/child"`` for nested
    scopes). Scoped tools shadow inherited ones of the same name.
    """

    def __init__(self, registry: _State, path: tuple[str, ...]) -> None:
        self._registry = registry
        self._path = path

    def restrict(self, allow: object = None, deny: object = None) -> Disposer:
        """Hide inherited tools from this scope and its descendants.

        ``allow`` keeps only the listed inherited tools (later inherited tools stay hidden);
        ``deny`` hides the listed ones (later unlisted tools stay visible). Restrictions
        intersect; the scope's own tools are never filtered. Every name must be a tool this
        scope currently inherits.
        """
        return self._registry._restrict(self._path, allow, deny)

    def close(self) -> None:
        """Remove this scope's tools, guards, restrictions and plugins, and its children's."""
        self._registry._close(self._path)

    def __repr__(self) -> str:
        return f"<ToolScope {self.agent!r}>"


def _is_prefix(prefix: tuple[str, ...], path: tuple[str, ...]) -> bool:
    return path[: len(prefix)] == prefix


def path_of(agent: str | None) -> tuple[str, ...]:
    """The scope path of an agent id; a malformed id (``"a//b"``, ``"a/"``) is refused."""
    if agent is None:
        return ()
    path = tuple(agent.split(SEPARATOR))
    if not isinstance(agent, str) or not all(path):
        raise RegistrationError(
            f"agent id {agent!r} is malformed: use scope keys joined by {SEPARATOR!r}, "
            "as ToolScope.agent gives them"
        )
    return path


def _with_caller(
    call: ToolExecutionInput, signal: CancelSignal | None, on_progress: ProgressListener | None
) -> ToolExecutionInput:
    """A resumed call with the resuming host's signal and progress listener."""
    if signal is None and on_progress is None:
        return call
    import attrs

    return attrs.evolve(call, signal=signal, on_progress=on_progress)


def _with_agent(call: ToolExecutionInput, agent: str | None) -> ToolExecutionInput:
    import attrs

    return attrs.evolve(call, agent=agent)
