"""Tool calls on DBOS (the ``dbos`` extra), on SQLite or PostgreSQL: each call one step
running the five stages, a pending approval a durable ``recv`` in the workflow.

In every process that runs workflows, before ``DBOS.launch()``::

    serve_tools(registry)

In a workflow::

    result = call_tool("write_file", {"path": "a.txt", "content": "hi"}, agent="a1")
    result = await call_tool_async(...)          # in an ``async`` workflow

See ``docs/scaling-out.md`` for what holds where, and ``examples/dbos_agent.py``.
"""

from __future__ import annotations

from ._dbos_calls import call_tool, call_tool_async, serve_tools
from ._waiting import (
    ANSWERED,
    EXECUTE,
    OUTCOME_UNKNOWN,
    PROGRESS,
    RESUME,
    TICKET_STATE,
    Waiting,
    pending_ticket,
    result_text,
)

__all__ = [
    "ANSWERED",
    "EXECUTE",
    "OUTCOME_UNKNOWN",
    "PROGRESS",
    "RESUME",
    "TICKET_STATE",
    "Waiting",
    "call_tool",
    "call_tool_async",
    "pending_ticket",
    "result_text",
    "serve_tools",
]
