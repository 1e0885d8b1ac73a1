"""The registry every engine's conformance case runs on, in the test process or in a
worker process: the same tools, policy and store wherever it is built.

Everything a call does that a test counts is written to files in one state directory:
``effects`` (a line per body run that has an effect) and ``observed`` (a line per result
the observers saw: ``call_id tool code``), so a worker process that was killed still
leaves its count behind.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from dsh_tools import Ask, Deny, ToolRegistry, ToolRunContext, define_tool, hookimpl
from dsh_tools_plugins.approval_store import SqliteApprovalStore

STORE = "approvals.sqlite3"


def note(state: Path, file: str, line: str) -> None:
    """Append ``line`` to ``state/file`` (one write, so a killed process leaves whole lines)."""
    with open(state / file, "a", encoding="utf-8") as out:
        out.write(line + "\n")


def lines(state: Path, file: str) -> list[str]:
    """The lines of ``state/file`` so far (none when it does not exist)."""
    path = state / file
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def wait_for_line(state: Path, file: str, prefix: str, timeout_s: float = 20.0) -> str:
    """The first line of ``state/file`` that starts with ``prefix``, waiting for it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in lines(state, file):
            if line.startswith(prefix):
                return line
        time.sleep(0.02)
    raise AssertionError(f"no line starting {prefix!r} in {file} after {timeout_s} s")


class Policy:
    """``forbidden`` is denied, ``write`` asks a person; the observers note each result."""

    def __init__(self, state: Path) -> None:
        self.state = state

    @hookimpl
    def dsh_tools_pre_execute(self, execution: Any) -> object:
        if execution.name == "forbidden":
            return Deny("this agent may not call forbidden")
        if execution.name == "write":
            return Ask("writes a file")
        return None

    @hookimpl
    def dsh_tools_result(self, execution: Any, result: Any) -> None:
        code = result.error.info.code if result.is_error else "ok"
        note(self.state, "observed", f"{execution.call_id} {execution.name} {code}")


LEASE_S = 2.0
"""How long a killed worker's call reads as running before it reads unknown (the call
journal's lease; a retry waits for it)."""


def build_registry(state: Path) -> ToolRegistry:
    """The conformance registry, its tickets in ``state``'s SQLite store (shared by every
    process and by ``dsh-tools approvals``)."""
    registry = ToolRegistry(
        approval=lambda request: "pending",
        approval_store=SqliteApprovalStore(state / STORE),
        journal_lease_s=LEASE_S,
    )
    for tool in _tools(state):
        registry.register(tool)
    registry.add_plugin(Policy(state))
    return registry


def _tools(state: Path) -> list[Any]:
    def echo(args: Any, ctx: ToolRunContext) -> str:
        return f"echo {args['text']}"

    def write(args: Any, ctx: ToolRunContext) -> str:
        note(state, "effects", f"wrote {args['path']}")
        return f"wrote {args['path']}"

    async def slow(args: Any, ctx: ToolRunContext) -> str:
        note(state, "effects", "slow started")
        ctx.report_progress(1, 3, "first third")
        try:
            await asyncio.sleep(args["seconds"])  # an async body is interrupted here
        finally:
            if ctx.signal.cancelled:
                note(state, "effects", "slow saw its signal")
        return "slow done"

    async def crash(args: Any, ctx: ToolRunContext) -> str:
        # The first run waits to be killed; a run after it (a rerun) returns at once.
        note(state, "effects", f"ran {args['key']}")
        if len(lines(state, "effects")) == 1:
            await asyncio.sleep(60)
        return "crash done"

    text = {"text": {"type": "string", "required": True}}
    path = {"path": {"type": "string", "required": True}}
    seconds = {"seconds": {"type": "number", "required": True}}
    key = {"key": {"type": "string", "required": True}}
    return [
        define_tool(name="echo", description="Echo.", parameters=text, execute=echo),
        define_tool(name="forbidden", description="Denied.", parameters=text, execute=echo),
        define_tool(name="write", description="Write.", parameters=path, execute=write),
        define_tool(name="slow", description="Slow.", parameters=seconds, execute=slow),
        define_tool(name="crash", description="Crash.", parameters=key, execute=crash),
        define_tool(
            name="crash_idempotent",
            description="Crash, idempotent.",
            parameters=key,
            execute=crash,
            metadata={"idempotent": True},
        ),
    ]


def dumps(value: Any) -> str:
    """One line of JSON (what a worker process prints as its result)."""
    return json.dumps(value, sort_keys=True)
