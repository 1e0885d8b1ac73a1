"""Tool calls on Temporal (the ``temporal`` extra): each call one activity running the five
stages, a pending approval a durable wait in the workflow.

In a workflow (this module imports nothing of ``dsh_tools``, so workflow code may import
it freely)::

    result = await call_tool("write_file", {"path": "a.txt", "content": "hi"}, agent="a1")

In the worker's process, one line registers the activities of a registry::

    Worker(client, task_queue="agents", workflows=[Agent], activities=tool_activities(registry))

See ``docs/scaling-out.md`` for what holds where, and ``examples/temporal_agent.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._temporal_flow import call_tool
from ._waiting import (
    ANSWERED,
    EXECUTE,
    OUTCOME_UNKNOWN,
    RESUME,
    TICKET_STATE,
    Waiting,
    pending_ticket,
    result_text,
)

if TYPE_CHECKING:
    from dsh_tools._registry import ToolRegistry

__all__ = [
    "ANSWERED",
    "EXECUTE",
    "OUTCOME_UNKNOWN",
    "RESUME",
    "TICKET_STATE",
    "Waiting",
    "call_tool",
    "pending_ticket",
    "result_text",
    "tool_activities",
]


def tool_activities(registry: ToolRegistry) -> list[Callable[..., Any]]:
    """The activities that run ``registry``'s tool calls, for ``Worker(activities=...)``.

    Adds one execute wrapper to ``registry`` (once): a retried attempt of a call whose
    tool is not idempotent (``metadata`` ``idempotent`` or ``read_only``) ends
    ``OUTCOME_UNKNOWN`` instead of running its body again."""
    from ._temporal_worker import ToolActivities

    activities = ToolActivities(registry)
    return [activities.execute, activities.resume, activities.ticket_state]
