"""``add_plugin`` validates every hookimpl up front and leaves nothing behind when it refuses.

A mistake in a plugin (a misspelled hook or argument, a wrapper on a decision hook, an async
guard) must surface when the plugin is added, with a message naming the plugin and the
problem, never as a silently skipped policy at call time.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Generator
from typing import Any

import pytest

from dsh_tools._context import ToolRunContext
from dsh_tools._models import (
    Allow,
    Deny,
    ToolDefinition,
    ToolExecution,
    ToolExecutionInput,
    ToolExecutionResult,
)
from dsh_tools._registry import ToolRegistry
from dsh_tools.errors import RegistrationError
from dsh_tools.hookspecs import hookimpl

DECISION_HOOKS = [
    "dsh_tools_pre_execute",
    "dsh_tools_guard",
    "dsh_tools_post_execute",
    "dsh_tools_result",
]


def echo() -> ToolDefinition[Any]:
    def execute(arguments: Any, context: ToolRunContext) -> str:
        return "echoed"

    return ToolDefinition(
        name="echo", description="echo", parameters={"type": "object"}, execute=execute
    )


def call(name: str = "echo") -> ToolExecutionInput:
    return ToolExecutionInput(call_id="call-1", name=name)


@pytest.fixture
def registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(echo())
    return registry


def plugin_state(registry: ToolRegistry) -> set[str]:
    return {name for name, _ in registry.plugin_manager.list_name_plugin()}


def assert_rejected(registry: ToolRegistry, plugin: object, *fragments: str) -> str:
    """``add_plugin`` refuses ``plugin``, names it, and leaves the registry as it was."""
    before = plugin_state(registry)
    with pytest.raises(RegistrationError) as caught:
        registry.add_plugin(plugin)
    message = str(caught.value)
    label = getattr(plugin, "__name__", None) or type(plugin).__name__
    assert label in message, message
    for fragment in fragments:
        assert fragment in message, message
    assert caught.value.code == "INVALID_DEFINITION"
    assert plugin_state(registry) == before
    assert not registry.plugin_manager.is_registered(plugin)
    result = registry.execute_sync(call())
    assert not result.is_error, result
    return message


# --------------------------------------------------------------------------- unknown hooks


def test_a_marked_hookimpl_for_an_unknown_hook_is_rejected(registry: ToolRegistry) -> None:
    class MisspelledHook:
        @hookimpl
        def dsh_tools_pre_exec(self, execution: ToolExecution) -> Deny:
            return Deny("never")

    message = assert_rejected(
        registry, MisspelledHook(), "dsh_tools_pre_exec is not a dsh_tools hook"
    )
    for name in (*DECISION_HOOKS, "dsh_tools_execute"):
        assert name in message


def test_an_unmarked_dsh_tools_function_for_an_unknown_hook_is_rejected(
    registry: ToolRegistry,
) -> None:
    class ForgotTheMarker:
        def dsh_tools_gaurd(self, execution: ToolExecution) -> str:
            return "never"

    assert_rejected(registry, ForgotTheMarker(), "dsh_tools_gaurd is not a dsh_tools hook")


def test_a_module_plugin_with_an_unknown_hook_is_rejected_by_module_name(
    registry: ToolRegistry,
) -> None:
    module = types.ModuleType("acme_policy")

    def dsh_tools_resutl(execution: ToolExecution) -> None:
        return None

    module.dsh_tools_resutl = dsh_tools_resutl  # type: ignore[attr-defined]
    assert_rejected(registry, module, "'acme_policy'", "dsh_tools_resutl")


def test_an_unmarked_function_for_a_known_hook_is_used(registry: ToolRegistry) -> None:
    """The registry picks up unmarked ``dsh_tools_*`` functions (so typos are caught), which
    also means a known hook works without the marker."""

    class Unmarked:
        def dsh_tools_guard(self, execution: ToolExecution) -> str:
            return "unmarked guard ran"

    registry.add_plugin(Unmarked())
    result = registry.execute_sync(call())
    assert result.is_error
    assert result.error.message == "unmarked guard ran"


def test_non_hook_attributes_are_ignored(registry: ToolRegistry) -> None:
    class WithExtras:
        dsh_tools_version = "1.0"  # not a routine: not a hook

        def helper(self) -> None:
            raise AssertionError("never called")

        @hookimpl
        def dsh_tools_guard(self, execution: ToolExecution) -> None:
            return None

    registry.add_plugin(WithExtras())
    assert not registry.execute_sync(call()).is_error


# --------------------------------------------------------------------------- signatures


def test_a_misspelled_argument_name_is_rejected(registry: ToolRegistry) -> None:
    class Typo:
        @hookimpl
        def dsh_tools_post_execute(self, execution: ToolExecution, reslt: object) -> None:
            return None

    assert_rejected(registry, Typo(), "dsh_tools_post_execute", "reslt")


def test_a_valid_hookimpl_next_to_a_bad_one_is_not_registered_either(
    registry: ToolRegistry,
) -> None:
    """All or nothing: the valid guard of a rejected plugin never runs."""

    class HalfBroken:
        @hookimpl
        def dsh_tools_guard(self, execution: ToolExecution) -> str:
            return "leftover guard"

        @hookimpl
        def dsh_tools_result(self, execution: ToolExecution, reslt: object) -> None:
            return None

    class HalfUnknown:
        @hookimpl
        def dsh_tools_guard(self, execution: ToolExecution) -> str:
            return "leftover guard"

        @hookimpl
        def dsh_tools_resulting(self, execution: ToolExecution) -> None:
            return None

    assert_rejected(registry, HalfBroken(), "reslt")
    assert_rejected(registry, HalfUnknown(), "dsh_tools_resulting")


def test_hookimpls_may_take_any_subset_of_the_hook_arguments(registry: ToolRegistry) -> None:
    seen: list[str] = []

    class Subsets:
        @hookimpl
        def dsh_tools_pre_execute(self) -> None:
            seen.append("pre()")

        @hookimpl
        def dsh_tools_post_execute(self, result: ToolExecutionResult) -> None:
            seen.append(f"post(result) error={result.is_error}")

        @hookimpl
        def dsh_tools_result(self, result: ToolExecutionResult, execution: ToolExecution) -> None:
            seen.append(f"result(result, execution) {execution.name}")

    registry.add_plugin(Subsets())
    registry.execute_sync(call())
    assert seen == ["pre()", "post(result) error=False", "result(result, execution) echo"]


# --------------------------------------------------------------------------- wrappers


@pytest.mark.parametrize("hook", DECISION_HOOKS)
def test_a_wrapper_on_a_decision_hook_is_rejected(registry: ToolRegistry, hook: str) -> None:
    def wrapper(self: object, execution: ToolExecution) -> Generator[None, Any, Any]:
        return (yield)

    plugin = type("FlipsDecisions", (), {hook: hookimpl(wrapper=True)(wrapper)})()
    assert_rejected(registry, plugin, hook, "cannot be a wrapper")


def test_a_plain_execute_hookimpl_is_rejected(registry: ToolRegistry) -> None:
    class NotAWrapper:
        @hookimpl
        def dsh_tools_execute(self, execution: ToolExecution) -> None:
            return None

    assert_rejected(
        registry, NotAWrapper(), "dsh_tools_execute must be a @hookimpl(wrapper=True) generator"
    )


@pytest.mark.parametrize("hook", ["dsh_tools_execute", "dsh_tools_guard"])
def test_old_style_hookwrappers_are_rejected(registry: ToolRegistry, hook: str) -> None:
    def old_style(self: object, execution: ToolExecution) -> Generator[None, Any, None]:
        yield

    plugin = type("OldStyle", (), {hook: hookimpl(hookwrapper=True)(old_style)})()
    assert_rejected(registry, plugin, hook, "hookwrapper=True")


def test_a_wrapper_that_is_not_a_generator_is_rejected(registry: ToolRegistry) -> None:
    class NoYield:
        @hookimpl(wrapper=True)
        def dsh_tools_execute(self, execution: ToolExecution) -> None:
            return None

    assert_rejected(registry, NoYield(), "dsh_tools_execute", "generator")


def test_a_valid_execute_wrapper_is_accepted_and_runs(registry: ToolRegistry) -> None:
    wrapped: list[str] = []

    class Wrapper:
        @hookimpl(wrapper=True)
        def dsh_tools_execute(self, execution: ToolExecution) -> Generator[None, Any, Any]:
            wrapped.append(execution.name)
            return (yield)

    registry.add_plugin(Wrapper())
    assert registry.execute_sync(call()).content == [{"type": "text", "text": "echoed"}]
    assert wrapped == ["echo"]


# --------------------------------------------------------------------------- async guards


def test_an_async_guard_hookimpl_is_rejected(registry: ToolRegistry) -> None:
    class AsyncGuard:
        @hookimpl
        async def dsh_tools_guard(self, execution: ToolExecution) -> str:
            return "too late"

    assert_rejected(registry, AsyncGuard(), "dsh_tools_guard is async")


def test_async_pre_execute_and_observers_are_accepted(registry: ToolRegistry) -> None:
    seen: list[str] = []

    class AsyncPolicy:
        @hookimpl
        async def dsh_tools_pre_execute(self, execution: ToolExecution) -> Deny:
            seen.append("pre")
            return Deny("async deny")

        @hookimpl
        async def dsh_tools_result(self, result: ToolExecutionResult) -> None:
            seen.append("result")

    registry.add_plugin(AsyncPolicy())
    result = registry.execute_sync(call())
    assert result.error.message == "async deny"  # type: ignore[union-attr]
    assert seen == ["pre", "result"]


# --------------------------------------------------------------------------- identity


def test_a_plugin_with_no_hooks_is_rejected(registry: ToolRegistry) -> None:
    class Empty:
        def helper(self) -> None:
            return None

    assert_rejected(registry, Empty(), "implements no dsh_tools_* hook")


def test_the_same_plugin_twice_is_rejected(registry: ToolRegistry) -> None:
    seen: list[str | None] = []

    class Observer:
        @hookimpl
        def dsh_tools_result(self, execution: ToolExecution) -> None:
            seen.append(execution.agent)

    plugin = Observer()
    registry.add_plugin(plugin)
    for add in (
        lambda: registry.add_plugin(plugin),
        lambda: registry.add_plugin(plugin, name="another-name"),
        lambda: registry.scope("a").add_plugin(plugin),
    ):
        with pytest.raises(RegistrationError) as caught:
            add()
        assert "Observer' is already registered in this registry" in str(caught.value)
        assert f"(as {registry.plugin_manager.get_name(plugin)!r})" in str(caught.value)
    registry.execute_sync(call())
    assert seen == [None]


def test_a_taken_plugin_name_is_rejected(registry: ToolRegistry) -> None:
    class First:
        @hookimpl
        def dsh_tools_guard(self, execution: ToolExecution) -> None:
            return None

    class Second:
        @hookimpl
        def dsh_tools_guard(self, execution: ToolExecution) -> str:
            return "second"

    registry.add_plugin(First(), name="policy")
    with pytest.raises(RegistrationError, match=r"plugin 'policy' was not added: .*already"):
        registry.add_plugin(Second(), name="policy")
    assert not registry.execute_sync(call()).is_error


def test_a_blocked_plugin_name_is_rejected(registry: ToolRegistry) -> None:
    class Blocked:
        @hookimpl
        def dsh_tools_guard(self, execution: ToolExecution) -> str:
            return "blocked plugin ran"

    registry.plugin_manager.set_blocked("blocked-policy")
    with pytest.raises(RegistrationError, match=r"plugin 'blocked-policy' is blocked"):
        registry.add_plugin(Blocked(), name="blocked-policy")
    assert not registry.execute_sync(call()).is_error


def test_a_corrected_plugin_can_take_the_name_of_a_rejected_one(registry: ToolRegistry) -> None:
    class Broken:
        @hookimpl
        def dsh_tools_guard(self, execution: ToolExecution, extra: object) -> str:
            return "broken"

    class Fixed:
        @hookimpl
        def dsh_tools_guard(self, execution: ToolExecution) -> str:
            return "fixed"

    with pytest.raises(RegistrationError, match=r"(?s)plugin 'policy' is invalid: .*extra"):
        registry.add_plugin(Broken(), name="policy")
    registry.add_plugin(Fixed(), name="policy")
    assert registry.execute_sync(call()).error.message == "fixed"  # type: ignore[union-attr]


# --------------------------------------------------------------------------- disposers


def test_the_disposer_unregisters_idempotently_and_exactly(registry: ToolRegistry) -> None:
    seen: list[str] = []

    class Observer:
        @hookimpl
        def dsh_tools_result(self, execution: ToolExecution) -> None:
            seen.append(execution.call_id)

    plugin = Observer()
    first = registry.add_plugin(plugin)
    registry.execute_sync(call())
    first()
    assert not registry.plugin_manager.is_registered(plugin)
    registry.execute_sync(call())
    assert seen == ["call-1"]
    first()

    registry.add_plugin(plugin)  # the same plugin again: a new registration
    first()  # the old disposer must not undo it
    assert registry.plugin_manager.is_registered(plugin)
    registry.execute_sync(call())
    assert seen == ["call-1", "call-1"]


def test_a_scoped_plugin_disposer_unregisters_it(registry: ToolRegistry) -> None:
    class DenyScoped:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> Deny:
            return Deny("scoped deny")

    dispose = registry.scope("a").add_plugin(DenyScoped())
    assert registry.scope("a").execute_sync(call()).is_error
    dispose()
    assert not registry.scope("a").execute_sync(call()).is_error
    assert plugin_state(registry) == set()


# --------------------------------------------------------------------------- order


def recording_plugin(
    label: str, log: list[str], decision: Callable[[], object] = lambda: None, **opts: bool
) -> object:
    """A plugin whose pre-execute and result hooks log ``label``; ``opts`` go to hookimpl."""

    def pre(self: object, execution: ToolExecution) -> object:
        log.append(f"pre:{label}")
        return decision()

    def result(self: object, execution: ToolExecution) -> None:
        log.append(f"result:{label}")

    return type(
        f"Plugin_{label}",
        (),
        {
            "dsh_tools_pre_execute": hookimpl(**opts)(pre),
            "dsh_tools_result": hookimpl(**opts)(result),
        },
    )()


def test_tryfirst_and_trylast_order_pre_execute_and_observers(registry: ToolRegistry) -> None:
    """Registration order would run ``last`` first; the markers win. Among plain
    implementations the later registration runs first (pluggy's order)."""
    log: list[str] = []
    registry.add_plugin(recording_plugin("plain-1", log))
    registry.add_plugin(recording_plugin("first", log, tryfirst=True))
    registry.add_plugin(recording_plugin("plain-2", log))
    registry.add_plugin(recording_plugin("last", log, trylast=True))

    registry.execute_sync(call())

    assert log == [
        "pre:first",
        "pre:plain-2",
        "pre:plain-1",
        "pre:last",
        "result:first",
        "result:plain-2",
        "result:plain-1",
        "result:last",
    ]


def test_a_tryfirst_decision_wins_over_later_registrations(registry: ToolRegistry) -> None:
    log: list[str] = []
    registry.add_plugin(recording_plugin("deny", log, lambda: Deny("tryfirst deny"), tryfirst=True))
    registry.add_plugin(recording_plugin("allow", log, Allow))
    registry.add_plugin(recording_plugin("late", log, Allow, trylast=True))

    result = registry.execute_sync(call())

    assert result.error.message == "tryfirst deny"  # type: ignore[union-attr]
    assert [entry for entry in log if entry.startswith("pre:")] == ["pre:deny"]


def test_scoped_and_global_plugins_share_one_order(registry: ToolRegistry) -> None:
    log: list[str] = []
    registry.add_plugin(recording_plugin("global-last", log, trylast=True))
    registry.scope("a").add_plugin(recording_plugin("scoped", log))
    registry.add_plugin(recording_plugin("global-first", log, tryfirst=True))

    registry.scope("a").execute_sync(call())
    assert log[:3] == ["pre:global-first", "pre:scoped", "pre:global-last"]
    log.clear()
    registry.execute_sync(call())
    assert log[:2] == ["pre:global-first", "pre:global-last"]
