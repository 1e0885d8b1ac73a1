"""Where a call may reach in the file system, from the path arguments its tool declares.

Path rules (:mod:`dsh_tools_plugins.permissions`) judge places, not spellings. For a tool
with a :class:`~dsh_tools.ToolPaths` declaration, :class:`CallReach` turns each declared
argument of one call into a :class:`Reach`: the location the tool's own ``resolve``
gives, plus that location with symbolic links followed, and whether everything below
it is reached too (a search root). A pattern argument narrows the search root it
filters to what lies below both, and the root itself still counts as opened. Anything
that cannot be resolved makes the whole call *unresolved*, which rules treat as "may be
anywhere".

Rule prefixes are resolved here as well, against the same tool: a relative prefix
through the tool's ``resolve`` (so ``secrets`` is the workspace's ``secrets``), an
absolute one as given, with links followed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

import attrs

from dsh_tools._json import FrozenDict
from dsh_tools._paths import PathArgument, ToolPaths

__all__ = ["CallReach", "Reach", "inside", "split_glob"]

_GLOB_SPECIAL: Final = frozenset("*?[{")
_ABSENT: Final = object()


def split_glob(pattern: str) -> tuple[str, str]:
    """Split ``a/b/*.py`` into its literal directory ``a/b`` and the rest ``*.py``.

    The literal part is the leading components without ``*``, ``?``, ``[`` or ``{``
    (and not ``**``), never the last component; empty and ``.`` components are dropped.
    The glob tool starts its walk there; rules take it as what the pattern can reach.
    """
    parts = [part for part in pattern.split("/") if part not in ("", ".")]
    literal: list[str] = []
    for part in parts[:-1]:
        if _GLOB_SPECIAL & set(part) or part == "**":
            break
        literal.append(part)
    return "/".join(literal), "/".join(parts[len(literal) :])


def inside(path: str, prefix: str) -> bool:
    """Whether the absolute normalised ``path`` is ``prefix`` or lies below it, by whole
    components (``/w/src`` is not inside ``/w/sr``)."""
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


@attrs.frozen
class Reach:
    """A place one argument of a call touches: its ``spellings`` (where the tool opens
    it, then the same with links followed; equal ones once) and whether everything
    ``below`` it is reached as well."""

    spellings: tuple[str, ...]
    below: bool


class _Unresolved(Exception):
    """A declared argument whose place cannot be known."""


class CallReach:
    """The places one call of a declared tool reaches, and rule prefixes resolved for it.

    Both are computed on first use and kept, so several rules judging one call resolve
    each argument and each prefix once.
    """

    __slots__ = ("_arguments", "_paths", "_prefixes", "_properties", "_reaches", "_resolved")

    def __init__(
        self, paths: ToolPaths, parameters: FrozenDict, arguments: Mapping[str, object]
    ) -> None:
        self._paths = paths
        self._arguments = arguments
        properties = parameters.get("properties")
        self._properties = properties if isinstance(properties, FrozenDict) else FrozenDict()
        self._reaches: tuple[Reach, ...] | None = None
        self._resolved = False
        self._prefixes: dict[str, tuple[str, ...] | None] = {}

    def reaches(self) -> tuple[Reach, ...] | None:
        """What the call touches, one entry per declared argument it uses; ``None`` when
        any of them cannot be resolved (a wrong type, a path the tool would refuse, a
        pattern with ``..`` or a leading ``/``)."""
        if not self._resolved:
            self._resolved = True
            try:
                self._reaches = self._resolve_all()
            except _Unresolved:
                self._reaches = None
        return self._reaches

    def prefix(self, text: str) -> tuple[str, ...] | None:
        """The spellings of a rule prefix for this tool; ``None`` when it cannot be
        resolved (a relative prefix the tool would refuse)."""
        if text not in self._prefixes:
            try:
                located = text if os.path.isabs(text) else self._locate(text)
                self._prefixes[text] = _spellings(located)
            except (_Unresolved, ValueError):
                self._prefixes[text] = None
        return self._prefixes[text]

    # ------------------------------------------------------------------ resolving

    def _resolve_all(self) -> tuple[Reach, ...]:
        places: dict[str, Reach] = {}
        for argument in self._paths.arguments:
            if argument.kind == "pattern":
                continue
            value = self._value(argument.name)
            if value is not None:
                located = self._locate(value)
                places[argument.name] = Reach(_spellings(located), argument.kind == "tree")
        roots: list[Reach] = []
        for argument in self._paths.arguments:
            tree = argument.within
            if tree is not None and tree in places:
                pattern = self._value(argument.name)
                if pattern is not None:
                    root = places[tree]
                    roots.append(Reach(root.spellings, below=False))  # opened all the same
                    places[tree] = _narrowed(root, self._pattern_base(argument, pattern))
        return (*places.values(), *roots)

    def _value(self, name: str) -> str | None:
        """The text of the argument ``name`` (its schema default when absent); ``None``
        when it names nothing."""
        value = self._arguments.get(name, _ABSENT)
        if value is _ABSENT:
            schema = self._properties.get(name)
            value = schema.get("default") if isinstance(schema, FrozenDict) else None
        if value is None or isinstance(value, str):
            return value
        raise _Unresolved

    def _pattern_base(self, argument: PathArgument, pattern: str) -> Reach:
        """The directory a pattern's literal part names, as a reach below it."""
        if pattern.startswith("/") or ".." in pattern.split("/"):
            raise _Unresolved
        literal, _ = split_glob(pattern)
        base = "."
        if argument.relative_to is not None:
            relative = self._value(argument.relative_to)
            if relative is None:
                raise _Unresolved
            base = relative
        text = f"{base}/{literal}" if literal else base
        return Reach(_spellings(self._locate(text)), below=True)

    def _locate(self, text: str) -> str:
        """The tool's own resolution of ``text``; anything it raises means unresolved."""
        try:
            located = self._paths.resolve(text)
        except Exception:  # the tool would refuse it, or cannot say: fail closed
            raise _Unresolved from None
        if not isinstance(located, str) or not os.path.isabs(located):
            raise _Unresolved
        return located


def _spellings(located: str) -> tuple[str, ...]:
    """``located`` normalised, and with links followed when that differs."""
    lexical = os.path.normpath(located)
    real = os.path.realpath(lexical)
    return (lexical,) if real == lexical else (lexical, real)


def _narrowed(root: Reach, base: Reach) -> Reach:
    """What a walk of ``root`` filtered by a pattern below ``base`` reaches: the deeper
    of the two when one holds the other, else only ``root`` itself (the walk opens it
    and finds nothing). Judged on where the tool opens them, the first spellings. The
    root itself counts as opened either way (the caller keeps it)."""
    if inside(base.spellings[0], root.spellings[0]):
        return base
    if inside(root.spellings[0], base.spellings[0]):
        return root
    return Reach(root.spellings, below=False)
