"""The workflows the engine tests run: one tool call each. Workflow code: nothing of
``dsh_tools`` is imported here (Temporal's sandbox re-imports a workflow's modules)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

from dsh_tools_plugins.engines.temporal import Waiting, call_tool

QUICK = Waiting(first_s=0.1, max_s=0.5)
"""Look at a pending ticket often: the tests answer within seconds."""


@workflow.defn
class OneCall:
    """Make one tool call and return its result (``result_to_json``'s form)."""

    @workflow.run
    async def run(self, call: dict[str, Any]) -> dict[str, Any]:
        timeout = call.get("timeout_s")
        return await call_tool(
            call["name"],
            call["arguments"],
            agent=call.get("agent"),
            timeout=None if timeout is None else timedelta(seconds=timeout),
            heartbeat_timeout=timedelta(seconds=call.get("heartbeat_s", 2)),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200)),
            waiting=QUICK,
        )
