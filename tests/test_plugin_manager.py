"""``registry.plugin_manager`` cannot bypass policy: every change made through it is
validated like ``add_plugin`` and applies to the very next call.

Found in the first version: a ``Deny`` policy registered with
``registry.plugin_manager.register(...)`` was ignored until some unrelated registry change
(the plans were cached), and so were ``unregister`` and ``set_blocked``; hookimpls
registered that way were not validated at all.
"""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pluggy
import pytest

from dsh_tools._models import (
    Allow,
    Deny,
    ToolDefinition,
    ToolExecution,
    ToolExecutionInput,
    ToolExecutionResult,
)
from dsh_tools._plugins.loading import PLUGINS_GROUP, load_plugins
from dsh_tools._registry import ToolRegistry
from dsh_tools.errors import RegistrationError
from dsh_tools.hookspecs import hookimpl


def echo() -> ToolDefinition[Any]:
    return ToolDefinition(
        name="echo", description="echo", parameters={"type": "object"}, execute=lambda a, c: "ok"
    )


def code(registry: ToolRegistry, agent: str | None = None) -> str:
    """Run one call; ``ok`` or the failure's code. The first call builds (and caches)
    the plan, so a change that is not seen shows up as a stale ``ok``."""
    view = registry if agent is None else registry.scope(agent)
    result: ToolExecutionResult = view.execute_sync(ToolExecutionInput("c", "echo"))
    return result.code if result.is_error else "ok"  # type: ignore[union-attr]


class DenyAll:
    @hookimpl
    def dsh_tools_pre_execute(self, execution: ToolExecution) -> Deny:
        return Deny("denied by policy")


class AllowFirst:
    @hookimpl(tryfirst=True)
    def dsh_tools_pre_execute(self, execution: ToolExecution) -> Allow:
        return Allow()


POLICY_MODULE = """
from dsh_tools import Deny, hookimpl


class DenyAll:
    @hookimpl
    def dsh_tools_pre_execute(self, execution):
        return Deny("denied by an installed policy")


DENY = DenyAll()
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fake installed distribution ``deny-dist`` whose ``dsh_tools.plugins`` entry
    points are ``deny-class`` (the class) and ``deny-object`` (an instance); yields the
    name of the module it ships."""
    monkeypatch.delenv("DSH_TOOLS_BLOCK_PLUGINS", raising=False)
    module = f"deny_policy_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{module}.py").write_text(POLICY_MODULE)
    info = tmp_path / "deny_dist-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: deny-dist\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{PLUGINS_GROUP}]\ndeny-class = {module}:DenyAll\ndeny-object = {module}:DENY\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield module
    sys.modules.pop(module, None)


def _load_plugins(registry: ToolRegistry) -> None:
    load_plugins(registry, only=["deny-class"], strict=True)


def _load_setuptools_entrypoints(registry: ToolRegistry) -> None:
    registry.plugin_manager.load_setuptools_entrypoints(PLUGINS_GROUP, name="deny-object")


WAYS: dict[str, Callable[[ToolRegistry], object]] = {
    "registry.add_plugin": lambda registry: registry.add_plugin(DenyAll()),
    "scope.add_plugin": lambda registry: registry.scope("agent").add_plugin(DenyAll()),
    "plugin_manager.register": lambda registry: registry.plugin_manager.register(DenyAll()),
    "load_plugins": _load_plugins,
    "plugin_manager.load_setuptools_entrypoints": _load_setuptools_entrypoints,
}


@pytest.mark.parametrize("way", list(WAYS))
def test_a_deny_policy_added_any_way_denies_the_very_next_call(way: str, site: str) -> None:
    registry = ToolRegistry()
    registry.register(echo())
    assert code(registry, "agent") == "ok"
    WAYS[way](registry)
    assert code(registry, "agent") == "DENIED"


@pytest.mark.parametrize("how", ["unregister", "unregister by name", "set_blocked"])
def test_removing_an_allowing_policy_through_the_manager_applies_at_once(how: str) -> None:
    registry = ToolRegistry()
    registry.register(echo())
    registry.add_plugin(DenyAll())
    allow = AllowFirst()
    registry.plugin_manager.register(allow, name="allow-first")
    assert code(registry) == "ok"
    manager = registry.plugin_manager
    if how == "unregister":
        manager.unregister(allow)
    elif how == "unregister by name":
        manager.unregister(name="allow-first")
    else:
        manager.set_blocked("allow-first")
    assert code(registry) == "DENIED"


def test_a_scoped_plugin_unregistered_through_the_manager_leaves_no_scope_behind() -> None:
    registry = ToolRegistry()
    registry.register(echo())
    plugin = DenyAll()
    registry.scope("agent").add_plugin(plugin, name="policy")
    assert (code(registry), code(registry, "agent")) == ("ok", "DENIED")
    registry.plugin_manager.unregister(plugin)
    registry.plugin_manager.register(DenyAll(), name="policy")  # the same name, now global
    assert (code(registry), code(registry, "agent")) == ("DENIED", "DENIED")


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        (
            """
            class Plugin:
                @hookimpl(hookwrapper=True)
                def dsh_tools_execute(self, execution):
                    yield
            """,
            "hookwrapper=True",
        ),
        (
            """
            class Plugin:
                @hookimpl(wrapper=True)
                def dsh_tools_pre_execute(self, execution):
                    return (yield)
            """,
            "cannot be a wrapper",
        ),
        (
            """
            class Plugin:
                @hookimpl
                async def dsh_tools_guard(self, execution):
                    return "no"
            """,
            "guards are synchronous",
        ),
        (
            """
            class Plugin:
                def dsh_tools_pre_exec(self, execution):
                    return None
            """,
            "not a dsh_tools hook",
        ),
    ],
    ids=["hookwrapper", "wrapper on a decision hook", "async guard", "misspelled hook"],
)
def test_the_manager_validates_what_it_registers_as_add_plugin_does(
    source: str, problem: str
) -> None:
    namespace: dict[str, Any] = {"hookimpl": hookimpl}
    exec(textwrap.dedent(source), namespace)
    registry = ToolRegistry()
    registry.register(echo())
    with pytest.raises(pluggy.PluginValidationError, match=problem):
        registry.plugin_manager.register(namespace["Plugin"]())
    with pytest.raises(RegistrationError, match=problem):
        registry.add_plugin(namespace["Plugin"]())
    assert registry.plugin_manager.list_name_plugin() == []
    assert code(registry) == "ok"
