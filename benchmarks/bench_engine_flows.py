"""Case 13's workflows: the same calls as bare activities and through ``call_tool``.
Workflow code: it imports nothing of ``dsh_tools`` (Temporal's sandbox re-imports it)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow

from dsh_tools_plugins.engines.temporal import call_tool


@activity.defn(name="bench.add")
async def add(arguments: dict[str, int]) -> int:
    """The tool's body, as a bare activity."""
    return arguments["a"] + arguments["b"]


@workflow.defn
class BareActivities:
    @workflow.run
    async def run(self, calls: int) -> int:
        total = 0
        for n in range(calls):
            total += await workflow.execute_activity(
                "bench.add", {"a": n, "b": 1}, start_to_close_timeout=timedelta(seconds=30)
            )
        return total


@workflow.defn
class ToolCalls:
    @workflow.run
    async def run(self, calls: int) -> int:
        total = 0
        for n in range(calls):
            result = await call_tool("add", {"a": n, "b": 1}, timeout=timedelta(seconds=30))
            total += result["value"]
        return total
