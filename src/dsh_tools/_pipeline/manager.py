"""The registry's pluggy manager: every change made through it is validated and takes effect.

``registry.plugin_manager`` is a :class:`PluginManager`. Whatever changes its plugins
(``register``, ``unregister``, ``set_blocked``, and ``load_setuptools_entrypoints``, which
registers) checks the hookimpls exactly as ``registry.add_plugin`` does and tells the
registry, which drops its plans: the very next call runs with the change, so a policy
cannot be added or removed behind the pipeline's back. Plugins registered directly apply
to every scope; ``scope.add_plugin`` records its scope here.

pluggy stays the one source of truth for which hookimpls exist and in what order; the
pipeline calls them itself (:mod:`dsh_tools._pipeline.stages`,
:mod:`dsh_tools._pipeline.wrappers`), so pluggy's hook-call tracing and monitoring do not
see pipeline calls.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable
from typing import Any

import pluggy

from .. import hookspecs
from ..hookspecs import PROJECT_NAME

_WRAPPER_HOOK = "dsh_tools_execute"
_HOOK_NAMES = frozenset(name for name in dir(hookspecs) if name.startswith(f"{PROJECT_NAME}_"))


class PluginManager(pluggy.PluginManager):
    """A pluggy manager for the ``dsh_tools`` hooks that validates every plugin it gets
    and reports every change to ``on_change``.

    It also picks up unmarked ``dsh_tools_*`` functions, so a forgotten marker or a
    misspelled hook name is reported instead of silently ignored.
    """

    def __init__(self, on_change: Callable[[], None]) -> None:
        super().__init__(PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self._on_change = on_change
        self._scopes: dict[str, tuple[str, ...]] = {}
        self._scoped: Counter[tuple[str, ...]] = Counter()
        """How many plugins each scope in ``_scopes`` has (a call asks on every run)."""
        self._distributions: dict[str, str] = {}

    def parse_hookimpl_opts(self, plugin: object, name: str) -> pluggy.HookimplOpts | None:
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is None and name.startswith(f"{PROJECT_NAME}_"):
            candidate = getattr(plugin, name, None)
            if inspect.isroutine(candidate):
                return {
                    "wrapper": False,
                    "hookwrapper": False,
                    "optionalhook": False,
                    "tryfirst": False,
                    "trylast": False,
                    "specname": None,
                }
        return opts

    def register(self, plugin: object, name: str | None = None) -> str | None:
        """Register ``plugin`` for every scope; raises ``pluggy.PluginValidationError``
        when its hookimpls break the rules ``registry.add_plugin`` enforces."""
        return self.add(plugin, name, ())

    def add(self, plugin: object, name: str | None, path: tuple[str, ...]) -> str | None:
        """Register ``plugin`` for the scope ``path`` and its descendants."""
        if plugin is not None and getattr(type(plugin), "__hash__", None) is None:
            raise pluggy.PluginValidationError(
                plugin,
                "it is unhashable: pluggy keeps plugins in sets and tells them apart with "
                "==, so use @dataclass(eq=False) or give the class a __hash__",
            )
        registered = super().register(plugin, name)
        if registered is None:
            return None
        problem = self._problem(plugin)
        if problem:
            super().unregister(plugin, registered)
            raise pluggy.PluginValidationError(plugin, problem)
        if path:
            self._scopes[registered] = path
            self._scoped[path] += 1
        self._on_change()
        return registered

    def unregister(self, plugin: object | None = None, name: str | None = None) -> Any | None:
        """Unregister a plugin (by object or name) and all of its hook implementations."""
        if name is None and plugin is not None:
            name = self.get_name(plugin)
        removed = super().unregister(plugin, name)
        if name is not None:
            path = self._scopes.pop(name, None)
            if path is not None:
                self._scoped[path] -= 1
                if not self._scoped[path]:
                    del self._scoped[path]
            self._distributions.pop(name, None)
        self._on_change()
        return removed

    def set_distribution(self, name: str, distribution: str) -> None:
        """Note which distribution shipped the plugin registered as ``name`` (its entry
        point's), so decision records can name it."""
        self._distributions[name] = distribution
        self._on_change()

    def distribution(self, name: str) -> str | None:
        """The distribution that shipped the plugin ``name``, when an entry point did."""
        found = self._distributions.get(name)
        if found is None:
            plugin = self.get_plugin(name)
            for loaded, dist in self.list_plugin_distinfo():
                if loaded is plugin:
                    return str(dist.project_name)
        return found

    def has_scope(self, path: tuple[str, ...]) -> bool:
        """Whether a plugin was added to the scope ``path`` itself."""
        return path in self._scoped

    def names_within(self, path: tuple[str, ...]) -> list[str]:
        """The plugins added to the scope ``path`` or to a scope inside it."""
        return [name for name, scope in self._scopes.items() if _within(path, scope)]

    def argnames(self, hook: str) -> tuple[str, ...]:
        """The arguments the pipeline passes to ``hook``'s implementations, in order."""
        spec = getattr(self.hook, hook).spec
        return tuple(spec.argnames) if spec is not None else ()

    def impls(self, hook: str, path: tuple[str, ...]) -> list[pluggy.HookImpl]:
        """The implementations of ``hook`` that apply to ``path``, in pluggy's call order
        (``tryfirst``/``trylast`` honoured, later registrations first)."""
        impls = reversed(getattr(self.hook, hook).get_hookimpls())
        return [impl for impl in impls if _within(self._scopes.get(impl.plugin_name, ()), path)]

    def _problem(self, plugin: object) -> str | None:
        """What makes a registered plugin invalid here, or ``None``."""
        callers = self.get_hookcallers(plugin) or []
        if not callers:
            return "it implements no dsh_tools_* hook"
        for caller in callers:
            if not caller.has_spec():
                known = ", ".join(sorted(_HOOK_NAMES))
                return f"{caller.name} is not a dsh_tools hook (known hooks: {known})"
            for impl in caller.get_hookimpls():
                if impl.plugin is plugin:
                    problem = _impl_problem(caller.name, impl)
                    if problem:
                        return problem
        return None


_PROGRESS_HOOKS = frozenset({"dsh_tools_progress", "dsh_tools_progress_filter"})


def _impl_problem(hook: str, impl: pluggy.HookImpl) -> str | None:
    if impl.hookwrapper:
        return f"{hook} uses hookwrapper=True; use @hookimpl(wrapper=True)"
    if hook == _WRAPPER_HOOK and not impl.wrapper:
        return (
            f"{hook} must be a @hookimpl(wrapper=True) generator "
            "(dispatch = yield; return your dispatch)"
        )
    if hook != _WRAPPER_HOOK and impl.wrapper:
        return (
            f"{hook} cannot be a wrapper: only dsh_tools_execute wraps; "
            "decision hooks return decisions"
        )
    if hook == "dsh_tools_guard" and inspect.iscoroutinefunction(impl.function):
        return "dsh_tools_guard is async; guards are synchronous final checks"
    if hook in _PROGRESS_HOOKS and inspect.iscoroutinefunction(impl.function):
        return f"{hook} is async; progress hooks are plain functions, called from any thread"
    return None


def _within(scope: tuple[str, ...], path: tuple[str, ...]) -> bool:
    """Whether a plugin added to ``scope`` applies to calls of agent ``path``."""
    return path[: len(scope)] == scope
