"""What each scope registered itself, and what an agent sees through its chain of scopes.

The registry keeps one :class:`Layer` per scope path (the global layer is ``()``). An
agent sees the layers from the global one down to its own: each layer's restrictions
filter what the layers above it contributed, then its own tools are added (shadowing);
guards of every layer on the way apply.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import RegistrationError
from .plan import Impl, ToolEntry

Names = frozenset[str]


class Layer:
    """What one scope (or the global layer) registered itself."""

    __slots__ = ("guards", "path", "restrictions", "tools")

    def __init__(self, path: tuple[str, ...]) -> None:
        self.path = path
        self.tools: dict[str, ToolEntry] = {}
        self.guards: list[Impl] = []
        self.restrictions: list[tuple[Names | None, Names]] = []


def visible(layers: Iterable[Layer]) -> tuple[dict[str, ToolEntry], tuple[Impl, ...]]:
    """The tools and the registry guards an agent sees through ``layers``, top down."""
    tools: dict[str, ToolEntry] = {}
    guards: list[Impl] = []
    for layer in layers:
        for allow, deny in layer.restrictions:
            tools = {
                name: entry
                for name, entry in tools.items()
                if (allow is None or name in allow) and name not in deny
            }
        tools.update(layer.tools)
        guards.extend(layer.guards)
    return tools, tuple(guards)


def restriction(allow: object, deny: object, inherited: set[str]) -> tuple[Names | None, Names]:
    """``restrict(allow, deny)`` checked: name lists of tools the scope inherits."""
    if allow is None and deny is None:
        raise RegistrationError(
            "restrict() needs allow and/or deny (an empty filter is almost always a "
            "configuration that was meant to list tools)"
        )
    allow_names = _names("allow", allow) if allow is not None else None
    deny_names = _names("deny", deny) if deny is not None else frozenset()
    unknown = sorted(name for name in {*(allow_names or ()), *deny_names} if name not in inherited)
    if unknown:
        quoted = ", ".join(f'"{name}"' for name in unknown)
        plural = "s" if len(unknown) > 1 else ""
        known = ", ".join(sorted(inherited)) or "(none)"
        raise RegistrationError(
            f"restrict() names unknown inherited tool{plural} {quoted}; "
            f"tools this scope inherits: {known}"
        )
    return allow_names, deny_names


def _names(label: str, value: object) -> Names:
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
        raise RegistrationError(
            f"restrict({label}=...) must be a list of tool names, got {value!r}"
        )
    names = frozenset(value)
    bad = [name for name in names if not isinstance(name, str)]
    if bad:
        raise RegistrationError(
            f"restrict({label}=...) must list tool names (strings), got {bad!r}"
        )
    return names
