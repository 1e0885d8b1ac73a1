"""Find tools, guards and plugins that other distributions ship, and load them at startup.

Three entry point groups, whose names are stable (they are the contract with plugin
authors, so they are module constants and never change):

``dsh_tools.tools`` (:data:`TOOLS_GROUP`)
    names a :class:`~dsh_tools.ToolDefinition`, an iterable of them (a module-level list
    or tuple), or a zero-argument callable returning one or an iterable of them.
``dsh_tools.guards`` (:data:`GUARDS_GROUP`)
    names a guard function ``fn(execution) -> str | None``, added with
    ``registry.guard``.
``dsh_tools.plugins`` (:data:`PLUGINS_GROUP`)
    names a pluggy plugin implementing ``dsh_tools_*`` hooks: a module, an object, a
    class (instantiated once with no arguments, so its hookimpls can be ordinary methods),
    or a zero-argument factory function returning the plugin object (for plugins that read
    their configuration at load time), or ``None`` when that configuration leaves the
    plugin off (nothing is registered; the entry point still counts as loaded).

:func:`load_plugins` is the only place that discovers or imports them; importing
``dsh_tools`` never does. We do not use pluggy's ``load_setuptools_entrypoints``: it stops
at the first broken plugin with a bare ``ImportError`` that does not say which
distribution shipped it. Here every entry point is tried, each failure is reported with
its distribution, version, entry point and cause, and blocked entry points are never
imported at all.

Two exceptions to "a broken plugin is skipped and reported": an entry point that raises
:class:`~dsh_tools.errors.PluginConfigError` (its configuration, such as a rules file, is
broken) stops the whole call, and :attr:`LoadReport.policy_failures` lists the failed
entry points that could have held policy, which a host should refuse to run tools
without (``dsh-tools call`` and ``serve-mcp`` do).
"""

from __future__ import annotations

import logging
import os
import re
import weakref
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final

import attrs

from ..errors import PluginConfigError, PluginError
from .loaders import (
    LOADERS,
    Disposer,
    LoadFailure,
    PluginKind,
    dispose_all,
    shipped_by,
)
from .settings import given_settings

if TYPE_CHECKING:
    from importlib_metadata import EntryPoint

    from .._registry import ToolRegistry

__all__ = [
    "BLOCK_ENV_VAR",
    "GROUPS",
    "GUARDS_GROUP",
    "LoadReport",
    "PLUGINS_GROUP",
    "PluginFailure",
    "PluginKind",
    "PluginRecord",
    "TOOLS_GROUP",
    "load_plugins",
]

logger = logging.getLogger("dsh_tools")

TOOLS_GROUP: Final = "dsh_tools.tools"
"""Entry point group for tool definitions."""

GUARDS_GROUP: Final = "dsh_tools.guards"
"""Entry point group for guard functions."""

PLUGINS_GROUP: Final = "dsh_tools.plugins"
"""Entry point group for pluggy plugins implementing ``dsh_tools_*`` hooks."""

BLOCK_ENV_VAR: Final = "DSH_TOOLS_BLOCK_PLUGINS"
"""Comma-separated entry point names (or ``dist:<distribution>``) never to import."""

GROUPS: Final[Mapping[PluginKind, str]] = {
    "tools": TOOLS_GROUP,
    "guards": GUARDS_GROUP,
    "plugins": PLUGINS_GROUP,
}
"""Each kind and its entry point group, in the order :func:`load_plugins` loads them."""

POLICY_KINDS: Final[frozenset[PluginKind]] = frozenset({"guards", "plugins"})
"""Kinds whose entry points may deny calls: one that failed to load may be a missing
policy (a tools entry point that failed only means missing tools)."""

_DIST_PREFIX = "dist:"


@attrs.frozen
class PluginRecord:
    """One entry point that loaded: where it came from and what it added."""

    name: str
    kind: PluginKind
    distribution: str
    version: str
    entry_point: str
    tools: tuple[str, ...] = ()
    hooks: tuple[str, ...] = ()

    @property
    def group(self) -> str:
        """The entry point group (``dsh_tools.<kind>``)."""
        return GROUPS[self.kind]


@attrs.frozen
class PluginFailure:
    """One entry point that could not be loaded, and why; nothing of it stays registered."""

    name: str
    kind: PluginKind
    distribution: str
    version: str
    entry_point: str
    error: str

    @property
    def group(self) -> str:
        """The entry point group (``dsh_tools.<kind>``)."""
        return GROUPS[self.kind]

    @property
    def message(self) -> str:
        """One line naming distribution, version, entry point (as in entry_points.txt), cause."""
        return (
            f"{self.distribution} {self.version}: entry point "
            f"[{self.group}] {self.name} = {self.entry_point}: {self.error}"
        )


@attrs.frozen
class LoadReport:
    """What one :func:`load_plugins` call found: loaded, failed and blocked entry points.

    ``loaded`` also lists entry points an earlier call loaded into the same registry.
    ``blocked`` holds the names of entry points skipped, unimported, because of ``block``
    or :data:`BLOCK_ENV_VAR`. ``unmatched`` holds the ``block`` and ``only`` selectors
    that matched no installed entry point (a typo, or a plugin that is not installed).
    """

    loaded: tuple[PluginRecord, ...] = ()
    failed: tuple[PluginFailure, ...] = ()
    blocked: tuple[str, ...] = ()
    unmatched: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """True when no entry point failed."""
        return not self.failed

    @property
    def policy_failures(self) -> tuple[PluginFailure, ...]:
        """The failed entry points that could have held policy (:data:`POLICY_KINDS`).

        Nothing can tell what a plugin that did not import would have denied, so a host
        that runs tools should refuse to while this is not empty, unless someone chose
        to run without those plugins.
        """
        return tuple(failure for failure in self.failed if failure.kind in POLICY_KINDS)

    def format(self) -> str:
        """A plain-text table, one row per entry point, then blocked names and a summary."""
        header = ("STATUS", "KIND", "NAME", "DISTRIBUTION", "VERSION", "ENTRY POINT", "DETAILS")
        rows = [
            ("loaded", r.kind, r.name, r.distribution, r.version, r.entry_point, _provides(r))
            for r in self.loaded
        ]
        rows += [
            ("failed", f.kind, f.name, f.distribution, f.version, f.entry_point, f.error)
            for f in self.failed
        ]
        lines = []
        if rows:
            widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
            for row in [header, *rows]:
                cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
                lines.append("  ".join(cells).rstrip())
        else:
            lines.append("no plugins loaded")
        if self.blocked:
            lines.append(f"blocked: {', '.join(self.blocked)}")
        if self.unmatched:
            lines.append(f"matched no entry point: {', '.join(self.unmatched)}")
        lines.append(
            f"{len(self.loaded)} loaded, {len(self.failed)} failed, {len(self.blocked)} blocked"
        )
        return "\n".join(lines)


def _provides(record: PluginRecord) -> str:
    parts = []
    if record.tools:
        parts.append(f"tools: {', '.join(record.tools)}")
    if record.hooks:
        parts.append(f"hooks: {', '.join(record.hooks)}")
    return "; ".join(parts) or "-"


_Key = tuple[str, str, str, str]
"""(group, entry point name, value, normalized distribution name)."""

_LOADED: weakref.WeakKeyDictionary[ToolRegistry, dict[_Key, PluginRecord]] = (
    weakref.WeakKeyDictionary()
)
"""What each registry already got from entry points, so loading twice is a no-op."""


def load_plugins(
    registry: ToolRegistry,
    *,
    workspace: str | os.PathLike[str] | None = None,
    rules: str | os.PathLike[str] | None = None,
    sandbox: str | None = None,
    network: bool | None = None,
    block: Iterable[str] = (),
    only: Iterable[str] | None = None,
    strict: bool = False,
) -> LoadReport:
    """Discover the ``dsh_tools.*`` entry points and register them into ``registry``.

    ``workspace`` (the root the workspace tools are confined to), ``rules`` (a
    permission rules file), ``sandbox`` (``"auto"``, ``"required"`` or ``"off"``) and
    ``network`` configure the first-party entry points, and any other that reads
    :func:`plugin_settings` while it loads; one not given comes from its environment
    variable (``DSH_TOOLS_WORKSPACE``, ``DSH_TOOLS_RULES``, ``DSH_TOOLS_SANDBOX``,
    ``DSH_TOOLS_NETWORK``), as the ``dsh-tools`` command sets them. So two registries
    of one process can serve two workspaces. A workspace that is not a directory, or
    rules that are not a file, raise :class:`~dsh_tools.errors.PluginConfigError`.

    Entry point names in ``block`` (and in the comma-separated :data:`BLOCK_ENV_VAR`) are
    skipped without being imported; ``dist:<distribution>`` blocks every entry point of a
    distribution. ``only``, when given, restricts loading to the names (or ``dist:``
    selectors) it lists. A ``block`` or ``only`` selector that matches no installed entry
    point is logged as a warning and listed in ``LoadReport.unmatched``. An entry point
    this registry already got from an earlier call is not loaded again, so the call is
    idempotent.

    Each entry point is all-or-nothing. A failing one is logged as one warning line
    (logger ``dsh_tools``; the traceback of its cause follows at DEBUG level) and listed in
    the report while the others still load. When two distributions declare the same
    name in one group, the one found first on ``sys.path`` loads and the other is a
    failure that names it. With ``strict=True`` a failure instead undoes every
    registration this call made and raises one :class:`~dsh_tools.PluginError` that lists
    every failure.

    An entry point that raises :class:`~dsh_tools.errors.PluginConfigError` (the
    configuration it was given is broken) is not an optional plugin that failed: every
    registration of this call is undone and that error is raised, strict or not.
    """
    with given_settings(workspace, rules, sandbox, network):
        return _load(registry, list(block), only, strict)


def _load(
    registry: ToolRegistry, explicit_block: list[str], only: Iterable[str] | None, strict: bool
) -> LoadReport:
    """:func:`load_plugins`, with the settings in place."""
    import importlib_metadata

    found = _Pass(
        registry,
        _Selectors.parse([*explicit_block, *os.environ.get(BLOCK_ENV_VAR, "").split(",")]),
        None if only is None else _Selectors.parse(only),
        _LOADED.setdefault(registry, {}),
    )
    discovered = importlib_metadata.entry_points()
    for kind, group in GROUPS.items():
        first_of_name: dict[str, EntryPoint] = {}
        for entry_point in discovered.select(group=group):
            found.consider(kind, group, entry_point, first_of_name)
    found.settle(strict)
    unmatched = _unmatched(explicit_block, only, found.seen)
    for selector in unmatched:
        logger.warning("no installed plugin entry point matches %r", selector)
    return LoadReport(tuple(found.loaded), tuple(found.failed), tuple(found.blocked), unmatched)


@attrs.define
class _Pass:
    """What one :func:`load_plugins` call found, loaded and failed, in discovery order."""

    registry: ToolRegistry
    blocked_selectors: _Selectors
    wanted: _Selectors | None
    known: dict[_Key, PluginRecord]
    loaded: list[PluginRecord] = attrs.Factory(list)
    failed: list[PluginFailure] = attrs.Factory(list)
    causes: list[BaseException | None] = attrs.Factory(list)
    blocked: list[str] = attrs.Factory(list)
    fresh: dict[_Key, PluginRecord] = attrs.Factory(dict)
    disposers: list[Disposer] = attrs.Factory(list)
    seen: list[tuple[str, str]] = attrs.Factory(list)  # (entry point name, distribution)

    def consider(
        self,
        kind: PluginKind,
        group: str,
        entry_point: EntryPoint,
        first_of_name: dict[str, EntryPoint],
    ) -> None:
        """Load ``entry_point`` unless it is left out, already loaded, blocked or shadowed."""
        distribution, version = shipped_by(entry_point)
        self.seen.append((entry_point.name, distribution))
        key = (group, entry_point.name, entry_point.value, _normalize(distribution))
        if self.wanted is not None and not self.wanted.match(entry_point.name, distribution):
            return
        if key in self.known:
            self.loaded.append(self.known[key])
            first_of_name.setdefault(entry_point.name, entry_point)
            return
        if self.blocked_selectors.match(entry_point.name, distribution):
            if entry_point.name not in self.blocked:
                self.blocked.append(entry_point.name)
            return
        winner = first_of_name.setdefault(entry_point.name, entry_point)
        try:
            if winner is not entry_point:
                raise LoadFailure(_shadowed(winner))
            tools, hooks, disposer = LOADERS[kind](self.registry, entry_point)
        except LoadFailure as exc:
            self.failed.append(
                PluginFailure(
                    entry_point.name, kind, distribution, version, entry_point.value, str(exc)
                )
            )
            self.causes.append(exc.__cause__)
            return
        except PluginConfigError:
            dispose_all(self.disposers)
            raise
        record = PluginRecord(
            entry_point.name, kind, distribution, version, entry_point.value, tools, hooks
        )
        self.loaded.append(record)
        self.fresh[key] = record
        self.disposers.append(disposer)

    def settle(self, strict: bool) -> None:
        """Under ``strict``, undo everything and raise if anything failed; otherwise keep
        what loaded and log each failure."""
        if strict and self.failed:
            dispose_all(self.disposers)
            lines = "\n".join(f"  - {failure.message}" for failure in self.failed)
            raise PluginError(
                f"{len(self.failed)} plugin entry point(s) failed to load "
                f"(strict mode: every registration of this call was undone):\n{lines}"
            )
        self.known.update(self.fresh)
        for failure, cause in zip(self.failed, self.causes, strict=True):
            logger.warning("plugin not loaded: %s", failure.message)
            if cause is not None:
                logger.debug("why %s failed to load:", failure.name, exc_info=cause)


def _shadowed(winner: EntryPoint) -> str:
    distribution, version = shipped_by(winner)
    return (
        f"the name is also declared by {distribution} {version} ({winner.value}), which comes "
        "first on sys.path and is the one loaded; block one of them (dist:<distribution>)"
    )


def _unmatched(
    block: Iterable[str], only: Iterable[str] | None, seen: list[tuple[str, str]]
) -> tuple[str, ...]:
    """The ``block`` and ``only`` selectors that match no discovered entry point."""
    found: list[str] = []
    for raw in [*block, *(only or ())]:
        selector = _Selectors.parse([raw])
        if selector.names | selector.distributions and not any(
            selector.match(name, distribution) for name, distribution in seen
        ):
            found.append(raw.strip())
    return tuple(dict.fromkeys(found))


# --------------------------------------------------------------------------- selection


def _normalize(distribution: str) -> str:
    """PEP 503 normalization, so ``dist:My_Plugin`` matches ``my-plugin``."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


@attrs.frozen
class _Selectors:
    """Entry point names plus normalized ``dist:`` distribution names."""

    names: frozenset[str]
    distributions: frozenset[str]

    @classmethod
    def parse(cls, items: Iterable[str]) -> _Selectors:
        names: set[str] = set()
        distributions: set[str] = set()
        for item in (raw.strip() for raw in items):
            if item.startswith(_DIST_PREFIX):
                distributions.add(_normalize(item[len(_DIST_PREFIX) :].strip()))
            elif item:
                names.add(item)
        return cls(frozenset(names), frozenset(distributions))

    def match(self, name: str, distribution: str) -> bool:
        return name in self.names or _normalize(distribution) in self.distributions
