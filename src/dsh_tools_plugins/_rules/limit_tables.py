"""The rules file's ``[limits]``, ``[[budget]]`` and ``[cache]`` tables, read into plugins.

:meth:`PermissionRules.from_toml_text <dsh_tools_plugins.permissions.PermissionRules>`
calls :func:`read_tables`, so a broken table refuses the whole file (with the line of the
key at fault), and the entry points ``limits``, ``budgets`` and ``cache`` (in
:mod:`dsh_tools_plugins.permissions`) register what the file of ``$DSH_TOOLS_RULES``
configures. Unknown keys are errors. Where the caps and
budgets count (``[limits]``'s ``store``) is :mod:`.limit_store`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from dsh_tools.errors import DefinitionError

from ..cache import ResultCache
from ..limits import CallBudget, CallBudgets, ConcurrencyLimit, SharedLimits
from .error import RulesError
from .limit_store import SharedPlace, place, shared_limits
from .toml_places import TABLE, key_line, line_of, region, top_key_line

_LIMITS_KEYS = frozenset({"per_tool", "per_agent", "overall", "store", "lease_s"})
_BUDGET_KEYS = frozenset({"tools", "limit", "window_s", "name"})
_CACHE_KEYS = frozenset({"ttl_s", "max_entries"})

Fail = Callable[[str, "str | None"], Exception]


@attrs.frozen
class LimitTables:
    """What a rules file's limit tables configure (``None``: the table is absent)."""

    concurrency: ConcurrencyLimit | None = None
    budgets: CallBudgets | None = None
    cache: ResultCache | None = None
    shared: SharedPlace | None = None
    """Where the caps and budgets count together (``None``: in each process); the
    plugins above count in the process until :meth:`opened`."""

    def opened(self) -> LimitTables:
        """These tables with the caps and budgets in their shared store, opened now
        (raises :class:`RulesError` naming the line when it cannot be)."""
        if self.shared is None:
            return self
        store = shared_limits(self.shared)
        return attrs.evolve(
            self,
            concurrency=_concurrency_in(self.concurrency, store),
            budgets=None
            if self.budgets is None
            else CallBudgets(_budget_in(budget, store) for budget in self.budgets.budgets),
        )


def read_tables(text: str, source: str, document: Mapping[str, Any]) -> LimitTables:
    """The plugins ``document``'s limit tables configure; raises ``RulesError`` naming
    the line of the key at fault."""
    concurrency = budgets = cache = shared = None
    if "limits" in document:
        written = region(text, "limits")
        fail = _failing(text, source, "limits", written)
        table = dict(_table(document["limits"], "limits", _LIMITS_KEYS, fail))
        shared = place(table, fail, source, lambda key: _line(text, key, written))
        if table:
            concurrency = _build(ConcurrencyLimit, table, fail)
    if "budget" in document:
        budgets = CallBudgets(_budgets(text, source, document["budget"]))
    if "cache" in document:
        fail = _failing(text, source, "cache", region(text, "cache"))
        cache = _build(ResultCache, _table(document["cache"], "cache", _CACHE_KEYS, fail), fail)
    return LimitTables(concurrency, budgets, cache, shared)


def _concurrency_in(limit: ConcurrencyLimit | None, store: SharedLimits) -> ConcurrencyLimit | None:
    if limit is None:
        return None
    return ConcurrencyLimit(
        limit.per_tool, per_agent=limit.per_agent, overall=limit.overall, store=store
    )


def _budget_in(budget: CallBudget, store: SharedLimits) -> CallBudget:
    return CallBudget(
        budget.limit, budget.tools, window_s=budget.window_s, name=budget.name, store=store
    )


def _budgets(text: str, source: str, tables: object) -> list[CallBudget]:
    headers = [
        match.start()
        for match in re.finditer(r"^[ \t]*\[\[[ \t]*budget[ \t]*\]\]", text, re.MULTILINE)
    ]
    if not isinstance(tables, list):
        raise _failing(text, source, "budget", None)(
            "'budget' must be an array of tables ([[budget]])", None
        )
    budgets = []
    for index, table in enumerate(tables):
        written = None
        if index < len(headers):
            following = TABLE.search(text, headers[index] + 1)
            written = (headers[index], following.start() if following else len(text))
        fail = _failing(text, source, "budget", written, f"[[budget]] #{index + 1}: ")
        given = _table(table, "budget", _BUDGET_KEYS, fail)
        if "limit" not in given:
            raise fail("missing 'limit' (how many calls)", None)
        budgets.append(_build(CallBudget, given, fail))
    return budgets


def _table(value: object, key: str, known: frozenset[str], fail: Fail) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise fail(f"{key} must be a table, got {value!r}", None)
    unknown = sorted(set(value) - known)
    if unknown:
        raise fail(
            f"unknown key {unknown[0]!r} in [{key}] (known keys: {', '.join(sorted(known))})",
            unknown[0],
        )
    return value


def _build(kind: Callable[..., Any], table: dict[str, Any], fail: Fail) -> Any:
    """``kind(**table)``; a refused setting names its key's line."""
    try:
        return kind(**table)
    except DefinitionError as error:
        key = next((k for k in sorted(table) if k in str(error)), None)
        raise fail(str(error), key) from None


def _failing(
    text: str, source: str, key: str, written: tuple[int, int] | None, prefix: str = ""
) -> Fail:
    def fail(problem: str, at: str | None) -> Exception:
        line = _line(text, at, written) or top_key_line(text, key)
        return RulesError(prefix + problem, source=source, line=line)

    return fail


def _line(text: str, key: str | None, written: tuple[int, int] | None) -> int | None:
    """The line of ``key`` in the region ``written`` (else of the region's header)."""
    if written is None:
        return None
    found = None if key is None else key_line(text, key, *written)
    return found or line_of(text, written[0])
