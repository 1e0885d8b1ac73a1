"""The pytest plugin, exercised the way its users meet it: in a test suite run by pytest."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]


def test_fixtures_are_listed_with_their_documentation(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--fixtures")
    for name in (
        "tool_registry",
        "tool_registry_factory",
        "approval_script",
        "call_recorder",
        "call_tool",
    ):
        result.stdout.fnmatch_lines([f"{name}*"])
    result.stdout.fnmatch_lines(["*fresh registry for this test*"])


def test_a_suite_using_every_fixture_passes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from dsh_tools import Ask, define_tool, hookimpl
        from dsh_tools.testing import assert_failure, assert_success

        def add_tool():
            return define_tool(
                name="add",
                description="Add.",
                parameters={"a": {"type": "integer", "required": True},
                            "b": {"type": "integer", "required": True}},
                execute=lambda args, ctx: args["a"] + args["b"],
            )

        class AskForAdd:
            @hookimpl
            def dsh_tools_pre_execute(self, execution):
                return Ask("adding needs approval")

        class DenyNegative:
            @hookimpl
            def dsh_tools_guard(self, execution):
                return "negative" if (execution.arguments or {}).get("a", 0) < 0 else None

        def test_call_and_assert(tool_registry, call_tool):
            tool_registry.register(add_tool())
            assert_success(call_tool("add", a=1, b=2), value=3, text="3")
            assert_failure(call_tool("add", a="1", b=2), "INVALID_ARGS")

        def test_registries_are_isolated(tool_registry_factory):
            first, second = tool_registry_factory(), tool_registry_factory()
            first.register(add_tool())
            assert first.get("add") is not None
            assert second.get("add") is None

        def test_scripted_approval(tool_registry, approval_script, call_tool):
            tool_registry.register(add_tool())
            tool_registry.add_plugin(AskForAdd())
            approval_script.answer("allowed-once", "rejected")
            assert_success(call_tool("add", a=1, b=1, agent="agent-1"))
            assert_failure(call_tool("add", a=1, b=1, agent="agent-1"), "DENIED",
                           contains="rejected")
            assert_failure(call_tool("add", a=1, b=1, agent="agent-1"), "DENIED",
                           contains="no approval channel")
            assert [r.tool_name for r in approval_script.requests] == ["add"] * 3

        def test_recorder_shows_the_path(tool_registry, call_recorder, call_tool):
            tool_registry.register(add_tool())
            tool_registry.add_plugin(DenyNegative())
            call_tool("add", a=1, b=2)
            assert call_recorder.last.stages[0] == "call"
            assert "body" in call_recorder.last.stages
            assert call_recorder.last.stages[-1] == "result"
            call_tool("add", a=-1, b=2)
            denied = call_recorder.last
            assert "body" not in denied.stages
            assert denied.outcomes("guard") == ["negative"]
            assert denied.result.is_error

        def test_the_registry_is_empty(tool_registry):
            assert tool_registry.schemas() == []
        """
    )
    result = pytester.runpytest("-W", "error")
    result.assert_outcomes(passed=5)


def test_the_marker_loads_named_installed_plugins(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.dsh_tools_plugins("no-such-plugin")
        def test_missing(tool_registry):
            pass
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*no installed plugin named no-such-plugin*"])


def test_the_plugin_is_inert_until_a_fixture_is_used(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import sys

        def test_nothing_imported():
            assert "dsh_tools._registry" not in sys.modules
        """
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)
