"""Case 16: what the call journal adds to a call (issue 31).

All through ``execute_sync`` of a plain ``def`` tool, measured interleaved in one run:

* a journaled call (a tool that is not read-only, on a SQLite approval store: one write
  transaction looks for an earlier unknown attempt of the same call under another key
  and begins its entry, one finishes it with the result; with a host's key, the begin
  skips the look), against the floor of
  what it does: the same call on the memory store (which journals only keyed calls)
  whose body does the same two SQLite writes itself, on one connection it keeps open as
  the store does (a row of the journal's table inserted, then updated with the result);
* a read-only tool's call on the SQLite store (the journal skips it) against the same
  call on the memory store: read-only calls pay nothing.
"""

from __future__ import annotations

import itertools
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from _harness import Row, Settings, compare_sync, ratio_row

from dsh_tools import MemoryApprovalStore, ToolExecutionInput, ToolRegistry, define_tool
from dsh_tools_plugins._stores.sqlite_journal import JOURNAL_SCHEMA
from dsh_tools_plugins.approval_store import SqliteApprovalStore

TARGET = 1.3
"""A journaled call at most this times the floor (issue 31)."""
READ_ONLY_TARGET = 1.1
"""A read-only call on a journal store at most this times the same call without one."""


def _add(args: Any, ctx: object) -> int:
    return args["a"] + args["b"]  # type: ignore[no-any-return]


_LOOK = "SELECT * FROM call_journal WHERE agent = ? AND key = ?"
_BEGIN = (
    "INSERT INTO call_journal VALUES (?, ?, 'add', ?, ?, 'owner', 'started', 0, 30, NULL, "
    "NULL, NULL, 1)"
)
_FINISH = "UPDATE call_journal SET state = 'finished', result = ? WHERE agent = ? AND key = ?"


def _journal_writes(path: Path) -> Any:
    """A body that does the journal's two writes itself: a started row of its table
    inserted (after looking for its key), then updated with the result; a write
    transaction each, on one connection it keeps open, as the store does."""
    connection = sqlite3.connect(path, isolation_level=None)
    for statement in JOURNAL_SCHEMA:
        connection.execute(statement)
    keys = itertools.count()

    def body(args: Any, ctx: object) -> int:
        key = f"k{next(keys)}"
        for statements in (
            ((_LOOK, ("a", key)), (_BEGIN, ("a", key, "0" * 64, key))),
            ((_FINISH, ('{"isError":false,"value":2}', "a", key)),),
        ):
            connection.execute("BEGIN IMMEDIATE")
            for statement, parameters in statements:
                connection.execute(statement, parameters).fetchall()
            connection.execute("COMMIT")
        return args["a"] + args["b"]  # type: ignore[no-any-return]

    return body


def _registry(store: object, body: Any = _add, read_only: bool = False) -> ToolRegistry:
    reg = ToolRegistry(approval_store=store)  # type: ignore[arg-type]
    reg.register(
        define_tool(
            name="add",
            description="Add two integers.",
            parameters={"a": {"type": "integer"}, "b": {"type": "integer"}},
            execute=body,
            blocking=False,
            metadata={"read_only": read_only},
        )
    )
    return reg


def _calls(reg: ToolRegistry, keyed: bool = False) -> Any:
    """A new call of ``reg`` each time (a new call id: a new journal entry); ``keyed``:
    with a host's idempotency key (its begin skips the look for an earlier attempt)."""
    counter = itertools.count(int(keyed) * 10**9)
    execute_sync = reg.execute_sync

    def call() -> object:
        n = next(counter)
        key = f"k{n}" if keyed else None
        arguments = {"a": 1, "b": n}
        return execute_sync(ToolExecutionInput(f"c{n}", "add", arguments, "a", idempotency_key=key))

    return call


def run(settings: Settings) -> list[Row]:
    folder = Path(tempfile.mkdtemp(prefix="dsh-bench-"))
    sqlite = SqliteApprovalStore(folder / "journal.sqlite3")
    journaled = _registry(sqlite)
    floor = _registry(MemoryApprovalStore(), body=_journal_writes(folder / "floor.sqlite3"))
    read_only = _registry(sqlite, read_only=True)
    read_only_memory = _registry(MemoryApprovalStore(), read_only=True)
    candidates = {
        "journaled": _calls(journaled),
        "journaled, keyed": _calls(journaled, keyed=True),
        "floor": _calls(floor),
        "read-only, SQLite store": _calls(read_only),
        "read-only, memory store": _calls(read_only_memory),
    }
    for call in candidates.values():
        result: Any = call()
        if result.is_error:
            raise AssertionError(f"benchmark tool call failed: {result!r}")
    number = max(20, int(250 * settings.scale))
    timings = compare_sync(candidates, number, settings.repeat)
    fast = compare_sync(
        {name: candidates[name] for name in ("read-only, SQLite store", "read-only, memory store")},
        max(100, int(5000 * settings.scale)),
        settings.repeat,
    )
    return [
        ratio_row(
            "16",
            "journaled call on SQLite (begin + finish)",
            timings["journaled"],
            "a body doing two SQLite writes itself",
            timings["floor"],
            TARGET,
        ),
        ratio_row(
            "16",
            "journaled call with a host's key (its begin skips the look)",
            timings["journaled, keyed"],
            "a body doing two SQLite writes itself",
            timings["floor"],
            TARGET,
        ),
        ratio_row(
            "16",
            "read-only call on the SQLite store",
            fast["read-only, SQLite store"],
            "the same on the memory store",
            fast["read-only, memory store"],
            READ_ONLY_TARGET,
        ),
    ]
