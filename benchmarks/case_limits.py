"""Case 12: what ``ConcurrencyLimit`` and ``ResultCache`` add to a call.

All through ``execute_sync`` on a plain ``def`` tool (no event loop), measured interleaved
in one run:

* an uncontended ``ConcurrencyLimit(per_tool=8)``, and a ``ResultCache`` miss (every call
  has new arguments), each against the same call with one pass-through wrapper;
* a ``ResultCache`` hit of a read-only tool whose body takes 1 ms, against a bare call of
  that body (what the hit saves);
* an uncontended ``ConcurrencyLimit(per_tool=8)`` whose permits live in a SQLite approval
  store (``SharedLimits``: held across processes, one transaction to take a permit and one
  to give it back), against the in-process one, and against the floor of what it does: a
  call whose body does two SQLite write transactions, on one connection it keeps open as
  the store does.
"""

from __future__ import annotations

import itertools
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import Row, Settings, compare_sync, ratio_row
from case_execute import Passthrough, registry

from dsh_tools import ToolExecutionInput, ToolRegistry
from dsh_tools_plugins.approval_store import SqliteApprovalStore
from dsh_tools_plugins.cache import ResultCache
from dsh_tools_plugins.limits import ConcurrencyLimit, SharedLimits


def _add(args: Any, ctx: object) -> int:
    return args["a"] + args["b"]  # type: ignore[no-any-return]


def _slow(args: Any, ctx: object) -> int:
    time.sleep(0.001)
    return args["a"] + args["b"]  # type: ignore[no-any-return]


def _two_writes(path: Path) -> Any:
    """A body that does what a shared permit costs: two write transactions (take the
    permit, give it back), on one connection it keeps open, as the store does."""
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("CREATE TABLE IF NOT EXISTS held (holder INTEGER)")

    def body(args: Any, ctx: object) -> int:
        for statement in ("INSERT INTO held VALUES (?)", "DELETE FROM held WHERE holder = ?"):
            connection.execute("BEGIN IMMEDIATE")
            connection.execute(statement, (args["b"],))
            connection.execute("COMMIT")
        return args["a"] + args["b"]  # type: ignore[no-any-return]

    return body


def _registry(wrapper: object, body: Any = _add) -> ToolRegistry:
    reg = registry(plugins=False, body=body)  # case 3's read-only, idempotent ``add``
    reg.add_plugin(wrapper)
    return reg


def _fresh(reg: ToolRegistry) -> Any:
    """A call of ``reg`` with new arguments each time (a cache never hits)."""
    counter = itertools.count()
    execute_sync = reg.execute_sync

    def call() -> object:
        return execute_sync(ToolExecutionInput("c1", "add", {"a": 1, "b": next(counter)}))

    return call


def _same(reg: ToolRegistry) -> Any:
    ready = ToolExecutionInput("c1", "add", {"a": 1, "b": 2})
    execute_sync = reg.execute_sync
    return lambda: execute_sync(ready)


def run(settings: Settings) -> list[Row]:
    folder = Path(tempfile.mkdtemp(prefix="dsh-bench-"))
    shared = SharedLimits(SqliteApprovalStore(folder / "limits.sqlite3"))
    passthrough = _registry(Passthrough())
    limited = _registry(ConcurrencyLimit(per_tool=8))
    limited_shared = _registry(ConcurrencyLimit(per_tool=8, store=shared))
    floor = _registry(Passthrough(), body=_two_writes(folder / "floor.sqlite3"))
    missing = _registry(ResultCache())
    hitting = _registry(ResultCache(), body=_slow)
    calls = (_fresh(passthrough), _fresh(limited), _fresh(limited_shared), _fresh(floor))
    for call in (*calls, _fresh(missing), _same(hitting)):
        result: Any = call()
        if result.is_error:
            raise AssertionError(f"benchmark tool call failed: {result!r}")
    number = max(100, int(5000 * settings.scale))
    timings = compare_sync(
        {
            "pass-through wrapper": _fresh(passthrough),
            "ConcurrencyLimit": _fresh(limited),
            "ResultCache miss": _fresh(missing),
            "ResultCache hit": _same(hitting),
            "1 ms body": lambda: _slow({"a": 1, "b": 2}, None),
        },
        number,
        settings.repeat,
    )
    shared_timings = compare_sync(
        {
            "shared": _fresh(limited_shared),
            "floor": _fresh(floor),
            "in process": _fresh(limited),
        },
        max(20, number // 20),
        settings.repeat,
    )
    return [*_rows(timings), *_shared_rows(shared_timings)]


def _rows(timings: dict[str, Any]) -> list[Row]:
    base = timings["pass-through wrapper"]
    return [
        ratio_row(
            "12",
            "uncontended ConcurrencyLimit(per_tool=8)",
            timings["ConcurrencyLimit"],
            "one pass-through wrapper",
            base,
            limit=1.3,
        ),
        ratio_row(
            "12",
            "ResultCache miss",
            timings["ResultCache miss"],
            "one pass-through wrapper",
            base,
            limit=1.3,
        ),
        ratio_row(
            "12",
            "ResultCache hit, 1 ms read-only tool",
            timings["ResultCache hit"],
            "its 1 ms body, bare",
            timings["1 ms body"],
            limit=1.0,
        ),
    ]


def _shared_rows(timings: dict[str, Any]) -> list[Row]:
    return [
        ratio_row(
            "12",
            "uncontended ConcurrencyLimit(per_tool=8), permits in SQLite (SharedLimits)",
            timings["shared"],
            "a call whose body does two SQLite writes itself",
            timings["floor"],
            limit=1.5,
        ),
        ratio_row(
            "12",
            "the same, permits in SQLite (SharedLimits)",
            timings["shared"],
            "the in-process ConcurrencyLimit",
            timings["in process"],
        ),
    ]
