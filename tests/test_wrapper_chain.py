"""The pipeline chains ``dsh_tools_execute`` wrappers exactly as pluggy chains wrappers.

The pipeline does not call pluggy's hook for stage 3 (it runs on every wrapped call, and
pluggy's bookkeeping cost more than the rest of the call); ``dsh_tools._pipeline.wrappers.chain``
implements pluggy's protocol instead. This differential test runs the same wrappers, in
every order and with every way a wrapper can behave or misbehave, through both, and
requires the same events in the same order and the same outcome.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pluggy
import pytest

from dsh_tools._pipeline.wrappers import chain
from dsh_tools._registry import ToolRegistry
from dsh_tools.hookspecs import PROJECT_NAME, hookimpl

BEHAVIORS = [
    "passes",
    "raises before its yield",
    "raises after its yield",
    "recovers from an inner error",
    "never yields",
    "raises StopIteration before its yield",
    "raises StopIteration after its yield",
    "yields twice",
]
ORDERS = ["tryfirst", "", "trylast"]

hookspec = pluggy.HookspecMarker(PROJECT_NAME)


class Spec:
    @hookspec(firstresult=True)
    def dsh_tools_execute(self, execution: Any, tool: Any) -> Any:
        """The pipeline's stage 3 as a pluggy hook: one result, the dispatch."""


class Body:
    """pluggy's side of the innermost dispatch: the hook's one plain implementation."""

    @hookimpl(trylast=True)
    def dsh_tools_execute(self, execution: Any, tool: Any) -> str:
        return "body"


def shown(error: BaseException) -> str:
    """An error as both sides must agree on it (the two word protocol errors alike)."""
    text = str(error)
    if isinstance(error, RuntimeError) and text.endswith("did not yield"):
        text = "did not yield"
    elif isinstance(error, RuntimeError) and text.endswith(("has second yield", "yielded twice")):
        text = "second yield"
    return f"{type(error).__name__}({text})"


def wrapper(tag: str, behavior: str, order: str, log: list[str]) -> object:
    """A plugin with one ``dsh_tools_execute`` wrapper that behaves as ``behavior``."""
    marker = hookimpl(wrapper=True, tryfirst=order == "tryfirst", trylast=order == "trylast")

    def implementation(self: Any, execution: Any, tool: Any) -> Any:
        log.append(f"{tag} before {execution}/{tool}")
        if behavior == "raises before its yield":
            raise ValueError(tag)
        if behavior == "never yields":
            return f"{tag} early"
        if behavior == "raises StopIteration before its yield":
            raise StopIteration
        try:
            inner = yield
        except Exception as error:
            log.append(f"{tag} saw {shown(error)}")
            if behavior == "recovers from an inner error":
                return f"{tag} recovered"
            raise
        log.append(f"{tag} got {inner!r}")
        if behavior == "raises after its yield":
            raise ValueError(tag)
        if behavior == "raises StopIteration after its yield":
            raise StopIteration
        if behavior == "yields twice":
            yield
        return (tag, inner)

    return type(f"Wrapper{tag}", (), {"dsh_tools_execute": marker(implementation)})()


Case = list[tuple[str, str]]


def through_pluggy(case: Case) -> tuple[list[str], str]:
    log: list[str] = []
    manager = pluggy.PluginManager(PROJECT_NAME)
    manager.add_hookspecs(Spec)
    manager.register(Body())
    for index, (behavior, order) in enumerate(case):
        manager.register(wrapper(str(index), behavior, order, log))
    return log, _outcome(lambda: manager.hook.dsh_tools_execute(execution="E", tool="T"))


def through_the_pipeline(case: Case) -> tuple[list[str], str]:
    log: list[str] = []
    registry = ToolRegistry()
    for index, (behavior, order) in enumerate(case):
        registry.add_plugin(wrapper(str(index), behavior, order, log))
    wrappers = registry._plan(()).wrappers
    return log, _outcome(lambda: chain(wrappers, "E", "T", "body"))


def _outcome(run: Callable[[], Any]) -> str:
    try:
        return f"returned {run()!r}"
    except Exception as error:
        return f"raised {shown(error)}"


SETTINGS = list(itertools.product(BEHAVIORS, ORDERS))
CASES = [
    [first, ("passes", middle), last]
    for first, last in itertools.product(SETTINGS, SETTINGS)
    for middle in ORDERS
]


def test_every_order_and_behavior_chains_as_pluggy_chains_it() -> None:
    for case in CASES:
        assert through_the_pipeline(case) == through_pluggy(case), case


@pytest.mark.parametrize("behavior", BEHAVIORS)
def test_a_lone_wrapper_behaves_as_under_pluggy(behavior: str) -> None:
    case = [(behavior, "")]
    assert through_the_pipeline(case) == through_pluggy(case)
