"""The DBOS workflows the engine tests run: one tool call each, sync and async."""

from __future__ import annotations

from typing import Any

from dbos import DBOS

from dsh_tools_plugins.engines.dbos import Waiting, call_tool, call_tool_async

QUICK = Waiting(first_s=0.1, max_s=0.5)
"""Look at a pending ticket often: the tests answer within seconds."""


@DBOS.workflow(name="dsh_tools_test.one_call")
def one_call(call: dict[str, Any]) -> dict[str, Any]:
    """Make one tool call and return its result (``result_to_json``'s form)."""
    return call_tool(
        call["name"],
        call["arguments"],
        agent=call.get("agent"),
        timeout_s=call.get("timeout_s"),
        waiting=QUICK,
    )


@DBOS.workflow(name="dsh_tools_test.one_call_async")
async def one_call_async(call: dict[str, Any]) -> dict[str, Any]:
    """:func:`one_call` as an ``async`` workflow."""
    return await call_tool_async(
        call["name"],
        call["arguments"],
        agent=call.get("agent"),
        timeout_s=call.get("timeout_s"),
        waiting=QUICK,
    )
