"""The first-party policies ship through the ``dsh_tools.plugins`` entry point: they read
what they need of a tool from the hooks' ``tool`` argument, so they take no registry and
load with no arguments (or from a subclass that knows its settings)."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from dsh_tools._context import ToolRunContext
from dsh_tools._define import define_tool
from dsh_tools._models import ToolExecutionInput, ToolExecutionResult
from dsh_tools._plugins.loading import PLUGINS_GROUP, load_plugins
from dsh_tools._registry import ToolRegistry
from dsh_tools.errors import ErrorCode, ToolError
from dsh_tools_plugins.retry import RetryPolicy

BUDGETS = """
from dsh_tools_plugins.timeouts import TimeoutPolicy


class WebBudgets(TimeoutPolicy):
    def __init__(self):
        super().__init__(per_tool={"web_*": 40})
"""


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A distribution shipping ``RetryPolicy`` itself and a ``TimeoutPolicy`` subclass."""
    monkeypatch.delenv("DSH_TOOLS_BLOCK_PLUGINS", raising=False)
    module = f"web_budgets_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{module}.py").write_text(BUDGETS)
    info = tmp_path / "policies_dist-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: policies-dist\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{PLUGINS_GROUP}]\n"
        "retry-policy = dsh_tools_plugins.retry:RetryPolicy\n"
        f"web-budgets = {module}:WebBudgets\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop(module, None)


def run(registry: ToolRegistry, name: str) -> ToolExecutionResult:
    return registry.execute_sync(ToolExecutionInput("c1", name))


@pytest.mark.usefixtures("installed")
def test_retry_policy_loads_with_no_arguments_and_reads_idempotency_from_the_tool() -> None:
    calls: list[int] = []

    def flaky(args: Any, ctx: ToolRunContext) -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ToolError("busy", code=ErrorCode.TRANSIENT)
        return "ok"

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="fetch",
            description="fetch",
            parameters={},
            execute=flaky,
            metadata={"idempotent": True},
        )
    )

    report = load_plugins(registry, only=["retry-policy"], strict=True)

    assert [record.name for record in report.loaded] == ["retry-policy"]
    assert isinstance(registry.plugin_manager.get_plugin("retry-policy"), RetryPolicy)
    assert run(registry, "fetch").value == "ok"  # type: ignore[union-attr]
    assert len(calls) == 3


@pytest.mark.usefixtures("installed")
def test_a_timeout_policy_subclass_loads_and_keeps_a_tools_own_timeout() -> None:
    async def slow(args: Any, ctx: ToolRunContext) -> str:
        await anyio.sleep(0.3)
        return "late"

    registry = ToolRegistry()
    registry.register(define_tool(name="web_fetch", description="w", parameters={}, execute=slow))
    registry.register(
        define_tool(name="web_own", description="w", parameters={}, execute=slow, timeout_ms=2000)
    )

    load_plugins(registry, only=["web-budgets"], strict=True)

    assert run(registry, "web_fetch").code == "TOOL_TIMEOUT"  # type: ignore[union-attr]
    assert run(registry, "web_own").value == "late"  # type: ignore[union-attr]
