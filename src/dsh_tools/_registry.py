"""The tool registry: layers of tools, guards, restrictions and plugins, one per scope.

A :class:`ToolRegistry` is the global layer; ``registry.scope("agent")`` returns a
:class:`ToolScope` with a layer of its own, and scopes nest. What a call can see and
which implementations run for it are computed per agent path into a plan
(:mod:`dsh_tools._pipeline.plan`) that is kept until anything changes, so the per-call cost does
not grow with the number of tools. What the registry and its scopes both do (register
through a view, run, resume or explain a call) is :mod:`dsh_tools._pipeline.views`; calls run in
:mod:`dsh_tools._pipeline.drivers`; the architecture page of the docs maps every stage to its
module.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import attrs
import pluggy

from ._models import ApprovalChannel, ToolDefinition, ToolExecutionInput
from ._pipeline.approval import channel
from ._pipeline.call import Handle, Waiting
from ._pipeline.layers import Layer, restriction, visible
from ._pipeline.loops import stops_the_caller
from ._pipeline.manager import PluginManager
from ._pipeline.plan import Plan, ToolEntry, build_plan, guard_impl, label
from ._pipeline.tickets import waiting
from ._pipeline.views import SEPARATOR, Disposer, Guard, ToolScope, _ViewBase, path_of
from ._tracing import Tracer
from .approvals import ApprovalStore, MemoryApprovalStore
from .errors import DefinitionError, RegistrationError

if TYPE_CHECKING:
    from .records import Origin

__all__ = ["Disposer", "Guard", "ToolRegistry", "ToolScope"]

_T = TypeVar("_T")


class ToolRegistry(_ViewBase):
    """Holds tools, guards and plugins, and runs calls through the guarded pipeline.

    :param approval: answers ``Ask`` decisions: an
        :class:`~dsh_tools._models.ApprovalService`, or a plain function (sync or
        ``async def``) taking the :class:`~dsh_tools._models.ApprovalRequest`; without
        one, ``Ask`` denies.
    :param approval_store: where ``allowed-always`` and ``rejected-always`` answers are
        remembered (:mod:`dsh_tools.approvals`); by default a
        :class:`~dsh_tools.approvals.MemoryApprovalStore` of this registry alone.
    :param default_timeout_ms: timeout for tools that declare none (``None``: no limit).
    :param tracer: called with a :class:`~dsh_tools._tracing.TraceEvent` for every step of
        every call (what each stage decided); for debugging, metrics and tests.
    :param approval_timeout_ms: when the approval service answers ``pending`` (or a call
        is repeated while its ticket is open), how long ``execute`` waits for a person's
        answer from any channel (``None``: it does not wait; the call ends
        ``APPROVAL_PENDING`` at once).
    :param approval_timeout: how a call that waited in vain ends: ``"pending"`` (its
        ticket stays open) or ``"expired"`` (the ticket expires with the wait).
    :param approval_expiry_s: how long an approval ticket stays open unless the ``Ask``
        says (``Ask(expires_in_s=...)``); a day by default.
    :param journal_lease_s: how long a journaled call's lease lasts unless its process
        renews it (it does, every third of it, while the call runs): after a crash, the
        call's outcome reads unknown this long after the process died (see the docs'
        "once" page).
    """

    def __init__(
        self,
        *,
        approval: ApprovalChannel | None = None,
        approval_store: ApprovalStore | None = None,
        default_timeout_ms: float | None = None,
        tracer: Tracer | None = None,
        approval_timeout_ms: float | None = None,
        approval_timeout: Literal["pending", "expired"] = "pending",
        approval_expiry_s: float = 86400.0,
        journal_lease_s: float = 30.0,
    ) -> None:
        self._registry = self
        if not (type(journal_lease_s) in (int, float) and 0 < journal_lease_s < float("inf")):
            raise DefinitionError(
                f"journal_lease_s must be a positive finite number of seconds, got "
                f"{journal_lease_s!r}"
            )
        self._handle = Handle(
            self._plan,
            waiting(approval_timeout_ms, approval_timeout, approval_expiry_s),
            self.present_call,
            float(journal_lease_s),
        )
        """What a call may ask of this registry (see :class:`~dsh_tools._pipeline.call.Handle`)."""
        self._path = ()
        self._layers: dict[tuple[str, ...], Layer] = {(): Layer(())}
        self._plugins: dict[str, object] = {}
        """Each add_plugin's name and a token of that registration (what its disposer
        may undo)."""
        self._plans: dict[tuple[str, ...], Plan] = {}
        self._pm = PluginManager(self._changed)
        self.approval = approval
        self.approval_store = approval_store
        self.default_timeout_ms = default_timeout_ms
        self.tracer = tracer

    @property
    def approval_waiting(self) -> Waiting:
        """``(approval_timeout_ms, approval_timeout, approval_expiry_s)``, as given;
        replacing it (checked as the constructor checks them) applies to the next call."""
        return self._handle.waiting

    @approval_waiting.setter
    def approval_waiting(self, value: Waiting) -> None:
        if not (isinstance(value, tuple) and len(value) == 3):
            raise DefinitionError(
                "approval_waiting must be (approval_timeout_ms, approval_timeout, "
                f"approval_expiry_s), got {value!r}"
            )
        self._handle = attrs.evolve(self._handle, waiting=waiting(*value))

    @property
    def tracer(self) -> Tracer | None:
        """The tracer; replacing it applies to the next call."""
        return self._tracer

    @tracer.setter
    def tracer(self, tracer: Tracer | None) -> None:
        if tracer is not None and not callable(tracer):
            raise RegistrationError(f"tracer must be callable, got {type(tracer).__qualname__}")
        self._tracer = tracer
        self._changed()

    @property
    def approval(self) -> ApprovalChannel | None:
        """The approval service (or function) as given; replacing it (or setting ``None``)
        applies to the next call. Anything else raises :class:`RegistrationError`."""
        return self._approval

    @approval.setter
    def approval(self, service: ApprovalChannel | None) -> None:
        self._channel = channel(service)
        self._approval = service
        self._changed()

    @property
    def approval_store(self) -> ApprovalStore:
        """Where remembered approvals live; replacing it applies to the next call, and
        ``None`` puts a new, empty :class:`~dsh_tools.approvals.MemoryApprovalStore`."""
        return self._approval_store

    @approval_store.setter
    def approval_store(self, store: ApprovalStore | None) -> None:
        if store is None:
            store = MemoryApprovalStore()
        elif not (
            callable(getattr(store, "recall", None)) and callable(getattr(store, "remember", None))
        ):
            raise RegistrationError(
                "approval_store must have recall() and remember() (see "
                f"dsh_tools.approvals.ApprovalStore), got {type(store).__qualname__}"
            )
        self._approval_store = store
        self._changed()

    @property
    def default_timeout_ms(self) -> float | None:
        """Timeout for tools that declare none; changing it applies to the next call."""
        return self._default_timeout_ms

    @default_timeout_ms.setter
    def default_timeout_ms(self, value: float | None) -> None:
        if value is not None and not (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and 0 < value < float("inf")
        ):
            raise DefinitionError(
                f"default_timeout_ms must be a positive finite number, got {value!r}"
            )
        self._default_timeout_ms = value
        self._changed()

    @property
    def plugin_manager(self) -> pluggy.PluginManager:
        """The pluggy manager of this registry (one per registry, never global).

        Changing plugins through it (``register``, ``unregister``, ``set_blocked``) is
        validated like :meth:`add_plugin` and applies to the very next call.
        """
        return self._pm

    # ------------------------------------------------------------------ mutation

    def _changed(self) -> None:
        """Anything that calls see changed: every plan is stale from now on."""
        for plan in self._plans.values():
            plan.stale = True
        self._plans.clear()

    def _layer(self, path: tuple[str, ...]) -> Layer:
        layer = self._layers.get(path)
        if layer is None:
            layer = self._layers[path] = Layer(path)
        return layer

    def _register(self, path: tuple[str, ...], definition: ToolDefinition[Any]) -> Disposer:
        if not isinstance(definition, ToolDefinition):
            raise DefinitionError(
                f"register() expects a ToolDefinition, got {type(definition).__qualname__}"
            )
        entry = ToolEntry(definition)
        name = definition.name
        layer = self._layer(path)
        if name in layer.tools:
            where = f"in scope {SEPARATOR.join(path)!r}" if path else "globally"
            hint = "" if path else " (register a per-agent variant through registry.scope(agent))"
            raise RegistrationError(f'tool "{name}" is already registered {where}{hint}')
        layer.tools[name] = entry
        self._changed()

        def dispose() -> None:
            if layer.tools.get(name) is entry:
                del layer.tools[name]
                self._changed()

        return dispose

    def _add_guard(
        self, path: tuple[str, ...], fn: Guard, origin: Origin | None = None
    ) -> Disposer:
        """Add a guard; ``origin`` names an entry point's guard and its distribution."""
        if not callable(fn):
            raise RegistrationError(f"guard() expects a callable, got {type(fn).__qualname__}")
        if inspect.iscoroutinefunction(fn):
            raise RegistrationError(
                f"guard {label(fn)} is async; guards are synchronous final checks "
                "(put asynchronous policy in dsh_tools_pre_execute)"
            )
        return self._added(self._layer(path).guards, guard_impl(fn, label(fn), origin))

    def _add_plugin(self, path: tuple[str, ...], plugin: object, name: str | None) -> Disposer:
        if self._pm.is_registered(plugin):
            raise RegistrationError(
                f"plugin {label(plugin)} is already registered in this registry "
                f"(as {self._pm.get_name(plugin)!r}); dispose of it first"
            )
        try:
            registered_name = self._pm.add(plugin, name, path)
        except pluggy.PluginValidationError as error:
            raise RegistrationError(f"plugin {label(plugin, name)} is invalid: {error}") from None
        except ValueError as error:
            raise RegistrationError(
                f"plugin {label(plugin, name)} was not added: {error}"
            ) from None
        if registered_name is None:
            raise RegistrationError(f"plugin {label(plugin, name)} is blocked in this registry")
        token = self._plugins[registered_name] = object()

        def dispose() -> None:
            if self._plugins.get(registered_name) is token:
                del self._plugins[registered_name]
                if self._pm.get_plugin(registered_name) is plugin:
                    self._pm.unregister(plugin)

        return dispose

    # ------------------------------------------------------------------ resolution

    def _chain(self, path: tuple[str, ...]) -> Iterator[Layer]:
        for depth in range(len(path) + 1):
            layer = self._layers.get(path[:depth])
            if layer is not None:
                yield layer

    def _plan(self, path: tuple[str, ...]) -> Plan:
        plan = self._plans.get(path)
        if plan is None:
            owner = self._owner(path)
            plan = self._plans.get(owner)
            if plan is None:
                plan = self._plans[owner] = self._build_plan(owner)
        return plan

    def _owner(self, path: tuple[str, ...]) -> tuple[str, ...]:
        """The scope whose plan the calls of agent ``path`` run: ``path`` or its nearest
        ancestor that has registrations of its own (tools, guards, restrictions or
        plugins). Agents without any share their ancestor's plan, so an agent per MCP
        client, or per request, adds no plan: plans grow with registrations only."""
        for depth in range(len(path), 0, -1):
            prefix = path[:depth]
            if prefix in self._layers or self._pm.has_scope(prefix):
                return prefix
        return ()

    def _build_plan(self, path: tuple[str, ...]) -> Plan:
        tools, guards = visible(self._chain(path))
        return build_plan(
            path,
            tools,
            guards,
            self._pm,
            self._channel,
            self.default_timeout_ms,
            self._tracer,
            self._approval_store,
        )

    def _execution_mode(self, call: ToolExecutionInput) -> str:
        try:
            plan = self._plan(path_of(call.agent))
        except RegistrationError:
            return "exclusive"
        entry = plan.tools.get(call.name)
        if entry is None or entry.definition.is_concurrency_safe is None:
            return "exclusive"
        try:
            arguments = entry.definition.arguments.parse(call.arguments)
            verdict = entry.definition.is_concurrency_safe(arguments)
            parallel = verdict is True and not _serialized(plan, call)
        except BaseException as error:  # the tool's own code: contained, as in a call
            if stops_the_caller(error):
                raise
            return "exclusive"
        return "parallel" if parallel else "exclusive"

    def _restrict(self, path: tuple[str, ...], allow: object, deny: object) -> Disposer:
        inherited: set[str] = set()
        for layer in self._chain(path[:-1]):
            inherited.update(layer.tools)
        allow_names, deny_names = restriction(allow, deny, inherited)
        return self._added(self._layer(path).restrictions, (allow_names, deny_names))

    def _added(self, records: list[_T], record: _T) -> Disposer:
        """Add ``record`` to a layer's ``records``; its disposer removes that very record
        (not an equal one), once."""
        records.append(record)
        self._changed()

        def dispose() -> None:
            for index, existing in enumerate(records):
                if existing is record:
                    del records[index]
                    self._changed()
                    return

        return dispose

    def _close(self, path: tuple[str, ...]) -> None:
        for layer_path in [p for p in self._layers if p[: len(path)] == path]:
            del self._layers[layer_path]
        for name in self._pm.names_within(path):
            self._plugins.pop(name, None)
            self._pm.unregister(name=name)
        self._changed()


# ---------------------------------------------------------------------- helpers


def _serialized(plan: Plan, call: ToolExecutionInput) -> bool:
    """Whether an execute wrapper runs this tool's calls one at a time: its plugin has a
    ``serializes(name, agent)`` method that says ``True`` (``ConcurrencyLimit`` with a
    cap of 1 does)."""
    for wrapper in plan.wrappers:
        serializes = getattr(getattr(wrapper.function, "__self__", None), "serializes", None)
        if callable(serializes) and serializes(call.name, call.agent) is True:
            return True
    return False
