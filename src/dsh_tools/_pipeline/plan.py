"""A scope's plan: what its calls can see and which implementations they run, decided once.

The registry builds one :class:`Plan` per scope with registrations of its own (an agent
path without any shares its nearest ancestor's) on first use, and keeps it until
anything changes (a registration, a plugin manager change, a setting); then it marks every
plan :attr:`~Plan.stale` and drops them. A call keeps the plan it started with: the
stages it runs are the ones registered when it entered, while the tool its body runs is
looked up again if the plan went stale meanwhile (:meth:`dsh_tools._pipeline.call.Call.resolve`).

The plan also picks each tool's runner, so nothing about it is re-decided per call:

* the **direct** runner (the body step alone) for a tool in :attr:`Plan.direct`: the scope
  has nothing to decide, observe or trace (no pre-execute, guard, wrapper, post-execute or
  result implementation, no tracer, no default timeout) and the tool nothing to time or
  finalize (no ``timeout_ms``, no ``finalize_content``); where its body runs (a worker
  thread or the loop) is the body step's to say, for both runners;
* the **staged** runner for every other name, unknown ones included; it skips each stage
  that is empty for the scope.

Progress listeners and filters (:attr:`Plan.listeners`, :attr:`Plan.filters`) do not
choose a runner: the body step streams for both (see :mod:`dsh_tools._pipeline.stream`).

And whether ``execute_sync`` needs an event loop for a call: :attr:`Plan.needs_loop` (an
``async def`` pre-execute, post-execute or result implementation, or an ``async``
approval service) or the tool's :attr:`ToolEntry.is_async` (an ``async def`` body).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from types import CodeType
from typing import TYPE_CHECKING, Any, cast

import attrs

from .._models import ApprovalService, ToolDefinition, ToolOutput, ToolSchema
from .._schema.codegen import Admitter
from .._schema.subset import compile_validator
from .._tracing import Tracer
from ..errors import DefinitionError, JsonSchemaError, within
from ..records import Origin

if TYPE_CHECKING:
    from ..approvals import ApprovalStore, JournalStore
    from .manager import PluginManager

Validator = Callable[[object], list[str]]


@attrs.frozen
class ToolEntry:
    """A registered definition with what registration derived from it once; making one
    checks what the definition's type cannot (raises :class:`DefinitionError`)."""

    definition: ToolDefinition[Any]
    schema: ToolSchema = attrs.field(init=False)
    output_validator: Validator | None = attrs.field(init=False)
    admit: Admitter = attrs.field(init=False)
    is_async: bool = attrs.field(init=False)
    """An ``async def`` body: ``execute_sync`` runs its calls on an event loop."""
    bare: bool = attrs.field(init=False)
    """Nothing to time or finalize: may take the direct runner."""
    read_only: bool = attrs.field(init=False)
    """``metadata["read_only"]``: the call journal skips its calls."""

    def __attrs_post_init__(self) -> None:
        definition = self.definition
        if not definition.name:
            raise DefinitionError("a tool name must be a non-empty string")
        if not callable(definition.execute):
            raise DefinitionError(f'tool "{definition.name}" execute must be callable')
        derived = {
            "schema": definition.schema(),
            "output_validator": _output_validator(definition),
            "admit": definition.arguments.admit,
            "is_async": is_async_callable(definition.execute),
            "bare": definition.timeout_ms is None and definition.finalize_content is None,
            "read_only": definition.metadata.get("read_only") is True,
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)


def _output_validator(definition: ToolDefinition[Any]) -> Validator | None:
    output, name = definition.output, definition.name
    if output is None:
        return None
    if not isinstance(output, ToolOutput) or not callable(output.render):
        raise DefinitionError(
            f'tool "{name}" output must be a ToolOutput(schema, render, '
            f"presentation_meta=None) with a callable render, got {output!r}"
        )
    if output.presentation_meta is not None and not callable(output.presentation_meta):
        raise DefinitionError(f'tool "{name}" output.presentation_meta must be callable')
    try:
        return compile_validator(output.schema, root="value")
    except JsonSchemaError as error:
        raise within(error, f'tool "{name}": output.schema') from None


@attrs.frozen
class Impl:
    """One implementation of a stage, bound at plan time to the parameters it declared
    (pluggy's ``HookImpl.argnames``). Every stage, the wrapper chain and the progress step
    call :attr:`call` with all of the hook's arguments, in the hookspec's order; it passes
    on those the implementation declared, in its own order, as pluggy does."""

    function: Callable[..., Any]
    argnames: tuple[str, ...]
    """The hook's arguments the implementation declared, in its order."""
    call: Callable[..., Any]
    """``function`` itself when it declared all of its hook's arguments in order, else an
    adapter (:func:`bind`)."""
    label: str
    is_async: bool
    codes: frozenset[CodeType] = frozenset()
    """The code of the implementation and of every function defined in it (how a failing
    wrapper's dispatch is traced back to the wrapper)."""
    origin: Origin | None = None
    """Who the implementation is, for trace events and decision records."""

    @property
    def takes_record(self) -> bool:
        """A result observer naming ``record``: the scope's calls collect decision records."""
        return _RECORD in self.argnames


def bind(
    function: Callable[..., Any], argnames: tuple[str, ...], passed: tuple[str, ...]
) -> Callable[..., Any]:
    """``function`` as called with all of its hook's arguments ``passed``: itself when it
    declared them all, in order; else an adapter that passes on the ones it declared
    (any subset, in any order), made by a maker compiled once per shape."""
    if argnames == passed:
        return function
    return _adapter(passed, argnames)(function)


@functools.cache
def _adapter(
    passed: tuple[str, ...], argnames: tuple[str, ...]
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """What makes the adapters of one shape: ``lambda execution, tool: implementation(
    execution)``, a plain call where a generic one (``f(*picked)``) costs a frame more.
    The names are the hookspec's, which pluggy checked the implementation's against."""
    taken, given = ", ".join(passed), ", ".join(argnames)
    source = f"lambda implementation: lambda {taken}: implementation({given})"
    return cast("Callable[[Callable[..., Any]], Callable[..., Any]]", eval(source))


class Plan:
    """Everything a call by one agent needs, computed once until the registry changes."""

    __slots__ = (
        "agent_path",
        "approval",
        "approval_store",
        "async_observers",
        "default_timeout_ms",
        "direct",
        "filters",
        "guards",
        "journal",
        "journal_all",
        "listeners",
        "needs_loop",
        "post",
        "pre",
        "recording",
        "result",
        "stale",
        "tools",
        "traced",
        "tracer",
        "wrappers",
    )

    def __init__(
        self,
        agent_path: tuple[str, ...],
        tools: Mapping[str, ToolEntry],
        stages: Mapping[str, tuple[Impl, ...]],
        approval: ApprovalService | None,
        default_timeout_ms: float | None,
        tracer: Tracer | None,
        approval_store: ApprovalStore,
    ) -> None:
        self.agent_path = agent_path
        """The scope the plan was built for; its descendants without registrations of
        their own share it (see ``ToolRegistry._owner``)."""
        self.tools = tools
        self.pre = stages["pre"]
        self.guards = stages["guards"]
        self.wrappers = stages["wrappers"]
        self.post = stages["post"]
        self.result = stages["result"]
        self.filters = stages["filters"]
        """``dsh_tools_progress_filter``: what the progress step folds each event through."""
        self.listeners = stages["listeners"]
        """``dsh_tools_progress``: a scope with any gives its calls a progress stream."""
        self.approval = approval
        self.approval_store = approval_store
        keeps = callable(getattr(approval_store, "begin_call", None))
        self.journal = cast("JournalStore", approval_store) if keeps else None
        """The approval store as the call journal, or ``None`` when it keeps none."""
        self.journal_all = keeps and getattr(approval_store, "durable", True) is not False
        """Every call of a tool that is not read-only is journaled (a durable store), not
        only those with a host's idempotency key (see :mod:`dsh_tools._pipeline.journal`)."""
        self.default_timeout_ms = default_timeout_ms
        self.tracer = tracer
        self.recording = any(impl.takes_record for impl in self.result)
        """A result observer wants each call's decision record: calls keep their events."""
        self.traced = tracer is not None or self.recording
        """Whether the stages report their steps (:meth:`dsh_tools._pipeline.call.Call.trace`)."""
        self.stale = False
        """Set once the registry changed after this plan was built."""
        self.async_observers = any(impl.is_async for impl in self.result)
        awaited = (*self.pre, *self.post, *self.result)
        self.needs_loop = any(impl.is_async for impl in awaited) or _is_async_service(approval)
        # Progress needs no stage: the body step, which both runners share, streams.
        staged = (self.pre, self.guards, self.wrappers, self.post, self.result)
        quiet = not (any(staged) or tracer is not None or default_timeout_ms is not None)
        self.direct: Mapping[str, ToolEntry] = (
            {
                name: entry
                for name, entry in tools.items()
                if entry.bare and (entry.read_only or not self.journal_all)
            }
            if quiet
            else {}
        )
        """The tools whose calls take the direct runner (see the module docstring)."""

    def dry_run(self) -> Plan:
        """This plan for ``explain``: every step is kept for the explanation and no
        tracer is told (a dry run is not a call)."""
        dry = object.__new__(Plan)
        for name in Plan.__slots__:
            object.__setattr__(dry, name, getattr(self, name))
        dry.tracer = None
        dry.recording = dry.traced = True
        return dry


_HOOKS = {
    "pre": "dsh_tools_pre_execute",
    "guards": "dsh_tools_guard",
    "wrappers": "dsh_tools_execute",
    "post": "dsh_tools_post_execute",
    "result": "dsh_tools_result",
    "filters": "dsh_tools_progress_filter",
    "listeners": "dsh_tools_progress",
}


def build_plan(
    path: tuple[str, ...],
    tools: Mapping[str, ToolEntry],
    guards: tuple[Impl, ...],
    manager: PluginManager,
    approval: ApprovalService | None,
    default_timeout_ms: float | None,
    tracer: Tracer | None,
    approval_store: ApprovalStore,
) -> Plan:
    """The plan of agent ``path``: ``tools`` it sees, the registry's ``guards`` that apply
    to it, and the hookimpls of ``manager`` that apply to it, in pluggy's call order."""
    stages = {stage: stage_impls(manager, hook, path) for stage, hook in _HOOKS.items()}
    stages["guards"] = guards + stages["guards"]
    return Plan(path, tools, stages, approval, default_timeout_ms, tracer, approval_store)


_RECORD = "record"
"""The result observers' argument that makes a scope's calls keep decision records."""


def stage_impls(manager: PluginManager, hook: str, path: tuple[str, ...]) -> tuple[Impl, ...]:
    """The implementations of ``hook`` that apply to ``path``, in pluggy's order, each
    bound to the arguments it declared."""
    passed = manager.argnames(hook)
    impls = []
    for impl in manager.impls(hook, path):
        named = impl.plugin_name
        name = _name(impl.plugin) if named.isdigit() else named
        argnames = tuple(impl.argnames)
        impls.append(
            Impl(
                impl.function,
                argnames,
                bind(impl.function, argnames, passed),
                "plugin " + repr(name),
                inspect.iscoroutinefunction(impl.function),
                _codes(impl.function),
                Origin(name, manager.distribution(named)),
            )
        )
    return tuple(impls)


def guard_impl(function: Callable[..., Any], name: str, origin: Origin | None = None) -> Impl:
    """A guard added with ``registry.guard(fn)``: it takes the execution only; ``origin``
    defaults to its qualified name."""
    origin = origin or Origin(_name(function))
    call = bind(function, ("execution",), _arguments("dsh_tools_guard"))
    return Impl(function, ("execution",), call, name, False, origin=origin)


def listener_impl(function: Callable[..., Any]) -> Impl:
    """A call's own ``on_progress`` listener, as one more ``dsh_tools_progress``
    implementation: it takes the execution and the event."""
    argnames = ("execution", "event")
    call = bind(function, argnames, _arguments("dsh_tools_progress"))
    return Impl(function, argnames, call, "on_progress listener", False)


@functools.cache
def _arguments(hook: str) -> tuple[str, ...]:
    """The arguments of ``hook``, in the hookspec's order."""
    from .. import hookspecs

    return tuple(inspect.signature(getattr(hookspecs, hook)).parameters)


def label(thing: object, name: str | None = None) -> str:
    """How messages name a plugin or function: its given name, else its qualified name."""
    return repr(name or _name(thing))


def _name(thing: object) -> str:
    """A plugin's or function's qualified name (a plugin object's: its class's)."""
    return str(
        getattr(thing, "__qualname__", None)
        or getattr(thing, "__name__", None)
        or type(thing).__qualname__
    )


def is_async_callable(function: object) -> bool:
    """True for ``async def`` functions, partials of them and objects with ``async __call__``."""
    while isinstance(function, functools.partial):
        function = function.func
    if inspect.iscoroutinefunction(function):
        return True
    return callable(function) and inspect.iscoroutinefunction(function.__call__)


def _is_async_service(service: ApprovalService | None) -> bool:
    return service is not None and inspect.iscoroutinefunction(getattr(service, "request", None))


def _codes(function: Callable[..., Any]) -> frozenset[CodeType]:
    code = getattr(getattr(function, "__func__", function), "__code__", None)
    found: set[CodeType] = set()
    pending = [] if code is None else [code]
    while pending:
        code = pending.pop()
        found.add(code)
        pending.extend(const for const in code.co_consts if isinstance(const, CodeType))
    return frozenset(found)
