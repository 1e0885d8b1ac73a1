"""How each kind of entry point is imported and registered, for :mod:`dsh_tools.plugins`.

One loader per kind (tools, guards, plugins). Each imports its entry point, checks what
it found, registers it all or nothing and returns what it added with a disposer that
undoes it; every failure is a :class:`LoadFailure` whose message says what went wrong.
:func:`dsh_tools.load_plugins` decides which entry points to load and reports.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Final, Literal

from .._models import ToolDefinition
from ..errors import PluginConfigError
from ..records import Origin

if TYPE_CHECKING:
    from importlib_metadata import EntryPoint

    from .._registry import ToolRegistry

_UNKNOWN = "unknown"

PluginKind = Literal["tools", "guards", "plugins"]
"""The kinds of entry point, each with its loader; :mod:`dsh_tools.plugins` re-exports it."""

Disposer = Callable[[], None]


class LoadFailure(Exception):
    """Why one entry point failed; becomes a :class:`~dsh_tools.PluginFailure`."""


def shipped_by(entry_point: EntryPoint) -> tuple[str, str]:
    """The name and version of the distribution that ships ``entry_point``."""
    dist = entry_point.dist
    if dist is None:
        return _UNKNOWN, _UNKNOWN
    return dist.name, dist.version


_Loaded = tuple[tuple[str, ...], tuple[str, ...], Disposer]
"""(tool names, hook names, disposer undoing every registration of the entry point)."""


def _cause(exc: BaseException) -> str:
    """``Type: message`` on one line (pluggy's messages span several), for tables and logs."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


@contextlib.contextmanager
def _failing_as(what: str) -> Iterator[None]:
    """Turn an exception into a :class:`LoadFailure` saying ``<what><Type>: <message>``.

    A :class:`PluginConfigError` passes through: :func:`~dsh_tools.load_plugins`
    raises it.
    """
    try:
        yield
    except PluginConfigError:
        raise
    except Exception as exc:
        raise LoadFailure(f"{what}{_cause(exc)}") from exc


def _import(entry_point: EntryPoint) -> object:
    with _failing_as("import failed: "):
        target = entry_point.load()
    return target


def _type_name(value: object) -> str:
    return type(value).__qualname__


def dispose_all(disposers: list[Disposer]) -> None:
    """Undo in reverse order, so each disposer sees the state it was made in."""
    for dispose in reversed(disposers):
        dispose()


def _load_tools(registry: ToolRegistry, entry_point: EntryPoint) -> _Loaded:
    definitions = _tool_definitions(_import(entry_point))
    disposers: list[Disposer] = []
    for definition in definitions:
        try:
            with _failing_as(f'registering tool "{definition.name}" failed: '):
                disposers.append(registry.register(definition))
        except BaseException:
            dispose_all(disposers)
            raise
    return tuple(d.name for d in definitions), (), lambda: dispose_all(disposers)


def _tool_definitions(target: object) -> tuple[ToolDefinition[object], ...]:
    produced = target
    if callable(target) and not isinstance(target, ToolDefinition):
        with _failing_as(f"calling {_callable_name(target)}() raised "):
            produced = target()
    if isinstance(produced, ToolDefinition):
        return (produced,)
    if isinstance(produced, (str, bytes, Mapping)) or not isinstance(produced, Iterable):
        raise LoadFailure(
            "expected a ToolDefinition, an iterable of them, or a zero-argument callable "
            f"returning them; got {_type_name(produced)}"
        )
    with _failing_as("iterating the tools raised "):
        items = tuple(produced)
    for index, item in enumerate(items):
        if not isinstance(item, ToolDefinition):
            raise LoadFailure(f"item {index} is a {_type_name(item)}, not a ToolDefinition")
    return items


def _callable_name(target: object) -> str:
    return str(getattr(target, "__qualname__", _type_name(target)))


def _load_guard(registry: ToolRegistry, entry_point: EntryPoint) -> _Loaded:
    guard = _import(entry_point)
    if isinstance(guard, type) or not callable(guard):
        raise LoadFailure(
            f"expected a guard function fn(execution) -> str | None, got {_type_name(guard)}"
        )
    origin = Origin(entry_point.name, shipped_by(entry_point)[0])
    with _failing_as("registering the guard failed: "):
        disposer = registry._add_guard((), guard, origin)
    return (), ("dsh_tools_guard",), disposer


def _load_plugin(registry: ToolRegistry, entry_point: EntryPoint) -> _Loaded:
    plugin = _import(entry_point)
    if isinstance(plugin, type) or inspect.isfunction(plugin):
        # A class, or a zero-argument factory function, makes the plugin object.
        with _failing_as(f"instantiating {_callable_name(plugin)}() raised "):
            plugin = plugin()
        if plugin is None:
            # The factory's configuration leaves the plugin off: nothing to register.
            return (), (), _nothing
    with _failing_as("registering the plugin failed: "):
        disposer = registry.add_plugin(plugin, name=entry_point.name)
    registry._pm.set_distribution(entry_point.name, shipped_by(entry_point)[0])
    callers = registry.plugin_manager.get_hookcallers(plugin) or []
    return (), tuple(sorted(caller.name for caller in callers)), disposer


def _nothing() -> None:
    """The disposer of an entry point that registered nothing."""


LOADERS: Final[Mapping[PluginKind, Callable[[ToolRegistry, EntryPoint], _Loaded]]] = {
    "tools": _load_tools,
    "guards": _load_guard,
    "plugins": _load_plugin,
}
