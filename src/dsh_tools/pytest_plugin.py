"""pytest fixtures for testing tools and plugins with isolated registries.

Registered through the ``pytest11`` entry point, so installing dsh-tools makes them
available; ``pytest --fixtures`` lists them. The plugin only provides fixtures: nothing is
autouse and nothing is imported until a fixture is requested.

Use ``@pytest.mark.dsh_tools_plugins("name", ...)`` on a test to load those installed
entry-point plugins into its ``tool_registry`` (strictly: a broken one fails the test).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from ._models import ToolExecutionResult
    from ._registry import ToolRegistry
    from .testing import CallRecorder, ScriptedApproval

MARKER = "dsh_tools_plugins"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(*names): load these installed dsh-tools entry-point plugins into the "
        "tool_registry fixture",
    )


@pytest.fixture
def approval_script() -> ScriptedApproval:
    """A scripted approval service: queue answers with ``.answer("allowed-once", ...)`` or
    ``.answer_for(tool, ...)``; ``.requests`` records every request. Unscripted requests
    are answered ``unavailable`` (a denial). The ``tool_registry`` fixture uses it."""
    from .testing import ScriptedApproval

    return ScriptedApproval()


@pytest.fixture
def call_recorder() -> CallRecorder:
    """Records every stage of every call of the ``tool_registry`` fixture:
    ``call_recorder.last.stages``, ``.outcomes("guard")``, ``.result``, and the call's
    decision record, ``.record`` (``.record.decided_by``, ``.record.to_json()``)."""
    from .testing import CallRecorder

    return CallRecorder()


@pytest.fixture
def tool_registry_factory(
    approval_script: ScriptedApproval, call_recorder: CallRecorder
) -> Callable[..., ToolRegistry]:
    """Makes fresh, isolated registries (no installed plugins loaded), wired to
    ``approval_script`` and ``call_recorder`` unless you pass ``approval=``/``tracer=``."""
    from ._registry import ToolRegistry

    def make(**options: Any) -> ToolRegistry:
        options.setdefault("approval", approval_script)
        options.setdefault("tracer", call_recorder)
        return ToolRegistry(**options)

    return make


@pytest.fixture
def tool_registry(
    request: pytest.FixtureRequest, tool_registry_factory: Callable[..., ToolRegistry]
) -> ToolRegistry:
    """A fresh registry for this test. It loads no installed entry points, except those
    named by ``@pytest.mark.dsh_tools_plugins(...)``."""
    registry = tool_registry_factory()
    marker = request.node.get_closest_marker(MARKER)
    if marker is not None:
        from ._plugins.loading import load_plugins

        names = [str(name) for name in marker.args]
        report = load_plugins(registry, only=names, strict=True)
        missing = sorted(set(names) - {record.name for record in report.loaded})
        if missing:
            pytest.fail(f"dsh_tools_plugins: no installed plugin named {', '.join(missing)}")
    return registry


@pytest.fixture
def call_tool(
    tool_registry: ToolRegistry, call_recorder: CallRecorder
) -> Callable[..., ToolExecutionResult]:
    """Run one call on ``tool_registry`` synchronously:
    ``call_tool("add", a=1, b=2)`` or ``call_tool("add", {"a": 1}, agent="x")``; what it
    streams is kept by ``call_recorder`` (``call_recorder.last.output``, ``.streamed``)."""
    from itertools import count

    from ._models import ToolExecutionInput

    ids = count(1)

    def call(
        name: str, arguments: object = None, *, agent: str | None = None, **kwargs: object
    ) -> ToolExecutionResult:
        payload = kwargs if arguments is None else arguments
        return tool_registry.execute_sync(
            ToolExecutionInput(
                call_id=f"test-{next(ids)}",
                name=name,
                arguments=payload,
                agent=agent,
                on_progress=call_recorder.on_progress,
            )
        )

    return call
