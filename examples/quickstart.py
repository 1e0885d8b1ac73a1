"""Define a tool, show the schema a model sees, and run three calls through the pipeline."""

from __future__ import annotations

import json
from typing import Annotated

from dsh_tools import (
    Deny,
    ToolExecution,
    ToolExecutionInput,
    ToolRegistry,
    hookimpl,
    thaw,
    tool,
)


@tool
def add(a: Annotated[int, "First addend"], b: Annotated[int, "Second addend"]) -> int:
    """Add two integers."""
    return a + b


class NoHugeNumbers:
    """A policy plugin: deny additions of numbers above one million."""

    @hookimpl
    def dsh_tools_pre_execute(self, execution: ToolExecution) -> Deny | None:
        values = (execution.arguments or {}).values()
        if any(isinstance(v, int) and v > 1_000_000 for v in values):
            return Deny("numbers above 1,000,000 are not allowed")
        return None


def main() -> None:
    registry = ToolRegistry()
    registry.register(add)
    registry.add_plugin(NoHugeNumbers())

    print("Schema sent to the model:")
    print(json.dumps([schema.to_json() for schema in registry.schemas()], indent=2))

    calls = [
        ToolExecutionInput(call_id="call-1", name="add", arguments={"a": 2, "b": 40}),
        ToolExecutionInput(call_id="call-2", name="add", arguments={"a": "2", "b": 40}),
        ToolExecutionInput(call_id="call-3", name="add", arguments={"a": 2_000_000, "b": 1}),
    ]
    for call in calls:
        result = registry.execute_sync(call)
        status = "error" if result.is_error else "ok"
        print(f"{call.call_id} {json.dumps(thaw(call.arguments))} -> {status}: {result.text}")


if __name__ == "__main__":
    main()
