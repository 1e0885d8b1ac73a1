"""Every hook implementation gets the arguments it declared, exactly as pluggy passes them.

The pipeline calls the implementations itself (one dispatch for every stage, the wrapper
chain and the progress step), bound at plan time to the parameters each declared. For
every hook and every subset of its arguments in every order, an implementation declaring
them gets, through a real call, what pluggy's own hook call gives it for the same values.
"""

from __future__ import annotations

import itertools
from typing import Any

import pluggy
import pytest

from dsh_tools import hookspecs
from dsh_tools._define import define_tool
from dsh_tools._models import ToolExecutionInput
from dsh_tools._registry import ToolRegistry
from dsh_tools.hookspecs import PROJECT_NAME, hookimpl

HOOKS = sorted(
    name for name in dir(hookspecs) if hasattr(getattr(hookspecs, name), "dsh_tools_spec")
)


def _spec(hook: str) -> tuple[str, ...]:
    manager = pluggy.PluginManager(PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    spec = getattr(manager.hook, hook).spec
    assert spec is not None
    return tuple(spec.argnames)


def _declarations(hook: str) -> list[tuple[str, ...]]:
    names = _spec(hook)
    return [
        order
        for size in range(len(names) + 1)
        for chosen in itertools.combinations(names, size)
        for order in itertools.permutations(chosen)
    ]


CASES = [(hook, declared) for hook in HOOKS for declared in _declarations(hook)]


def _plugin(hook: str, declared: tuple[str, ...], got: list[tuple[Any, ...]]) -> object:
    """A plugin whose one ``hook`` implementation declares ``declared`` (in that order)
    and notes what it was called with."""
    parameters = "".join(f", {name}" for name in declared)
    values = "".join(f"{name}, " for name in declared)
    ending = "return (yield)" if hook == "dsh_tools_execute" else "return None"
    source = f"def {hook}(self{parameters}):\n    got.append(({values}))\n    {ending}\n"
    namespace: dict[str, Any] = {"got": got}
    exec(source, namespace)  # real parameter names: what pluggy reads of an implementation
    marker = hookimpl(wrapper=hook == "dsh_tools_execute")
    return type("Declares", (), {hook: marker(namespace[hook])})()


class _Everything:
    """Notes every argument of every hook by name (and asks for decision records)."""

    def __init__(self) -> None:
        self.seen: dict[str, dict[str, Any]] = {}

    def _note(self, hook: str, **values: Any) -> None:
        self.seen.setdefault(hook, values)

    @hookimpl
    def dsh_tools_pre_execute(self, execution: Any, tool: Any) -> None:
        self._note("dsh_tools_pre_execute", execution=execution, tool=tool)

    @hookimpl
    def dsh_tools_guard(self, execution: Any, tool: Any) -> None:
        self._note("dsh_tools_guard", execution=execution, tool=tool)

    @hookimpl(wrapper=True)
    def dsh_tools_execute(self, execution: Any, tool: Any) -> Any:
        self._note("dsh_tools_execute", execution=execution, tool=tool)
        return (yield)

    @hookimpl
    def dsh_tools_post_execute(self, execution: Any, result: Any, tool: Any) -> None:
        self._note("dsh_tools_post_execute", execution=execution, result=result, tool=tool)

    @hookimpl
    def dsh_tools_result(self, execution: Any, result: Any, tool: Any, record: Any) -> None:
        values = {"execution": execution, "result": result, "tool": tool, "record": record}
        self._note("dsh_tools_result", **values)

    @hookimpl
    def dsh_tools_progress_filter(self, execution: Any, event: Any, tool: Any) -> None:
        self._note("dsh_tools_progress_filter", execution=execution, event=event, tool=tool)

    @hookimpl
    def dsh_tools_progress(self, execution: Any, event: Any, tool: Any) -> None:
        self._note("dsh_tools_progress", execution=execution, event=event, tool=tool)


def _reporting(args: Any, ctx: Any) -> str:
    ctx.report_progress(1, 2, "half")
    return "done"


@pytest.mark.parametrize(("hook", "declared"), CASES, ids=[f"{h}{d}" for h, d in CASES])
def test_an_implementation_gets_what_it_declared_as_under_pluggy(
    hook: str, declared: tuple[str, ...]
) -> None:
    everything = _Everything()
    in_a_call: list[tuple[Any, ...]] = []
    registry = ToolRegistry()
    registry.register(
        define_tool(name="report", description="d.", parameters={}, execute=_reporting)
    )
    registry.add_plugin(everything)
    registry.add_plugin(_plugin(hook, declared, in_a_call))

    result = registry.execute_sync(ToolExecutionInput("c1", "report", {}))

    assert not result.is_error, result
    values = everything.seen[hook]
    assert values["execution"].call_id == "c1"
    assert values["tool"].name == "report"
    if "record" in values:
        assert values["record"] is not None
    under_pluggy: list[tuple[Any, ...]] = []
    manager = pluggy.PluginManager(PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    manager.register(_plugin(hook, declared, under_pluggy))
    getattr(manager.hook, hook)(**values)
    assert len(in_a_call) == 1
    assert in_a_call == under_pluggy
