"""A deny path rule does not hide the error a model can correct from (issue 27, item 1)."""

from __future__ import annotations

from pathlib import Path

from dsh_tools._models import ToolExecutionFailure, ToolExecutionInput, ToolExecutionResult
from dsh_tools._registry import ToolRegistry
from dsh_tools_plugins.permissions import PermissionRules
from dsh_tools_plugins.tools import workspace_tools

RULES = """\
default = "allow"

[[rule]]
name = "no secrets"
action = "deny"
tool = "*"
path_prefix = "secrets"
reason = "secrets are off limits"
"""


def _registry(root: Path) -> ToolRegistry:
    (root / "secrets").mkdir()
    (root / "secrets" / "key").write_text("hunter2", encoding="utf-8")
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("x = 1\n", encoding="utf-8")
    registry = ToolRegistry()
    for tool in workspace_tools(root):
        registry.register(tool)
    registry.add_plugin(PermissionRules.from_toml_text(RULES))
    return registry


def _failure(registry: ToolRegistry, name: str, **arguments: object) -> ToolExecutionFailure:
    result: ToolExecutionResult = registry.execute_sync(
        ToolExecutionInput(call_id="c1", name=name, arguments=arguments)
    )
    assert isinstance(result, ToolExecutionFailure), result
    return result


def test_invalid_arguments_are_invalid_whatever_a_path_rule_says(tmp_path: Path) -> None:
    registry = _registry(tmp_path)
    for arguments in ({"path": 3}, {"path": None}, {}, {"path": ["secrets"]}):
        failure = _failure(registry, "read_file", **arguments)
        assert failure.code == "INVALID_ARGS", (arguments, failure.error.message)
        assert "off limits" not in failure.error.message


def test_a_path_outside_the_workspace_gets_the_confinement_error(tmp_path: Path) -> None:
    registry = _registry(tmp_path)
    unruled = ToolRegistry()
    for tool in workspace_tools(tmp_path):
        unruled.register(tool)
    for path in ("../../etc/passwd", "/etc/passwd", "src/../../x"):
        failure = _failure(registry, "read_file", path=path)
        confinement = _failure(unruled, "read_file", path=path)
        assert "workspace" in failure.error.message, (path, failure.error.message)
        assert failure.code == confinement.code
        assert failure.error.message == confinement.error.message


def test_a_search_that_could_reach_a_denied_folder_says_so(tmp_path: Path) -> None:
    registry = _registry(tmp_path)
    failure = _failure(registry, "grep", pattern="x")
    assert failure.code == "DENIED"
    assert "secrets are off limits" in failure.error.message
    assert 'could reach "secrets"' in failure.error.message
    # Reading inside the folder is denied plainly; a narrower search is not denied.
    assert "could reach" not in _failure(registry, "read_file", path="secrets/key").error.message
    narrow = registry.execute_sync(
        ToolExecutionInput(call_id="c2", name="grep", arguments={"pattern": "x", "path": "src"})
    )
    assert narrow.is_error is False


def test_explain_says_what_the_call_would_report(tmp_path: Path) -> None:
    registry = _registry(tmp_path)
    bad = registry.explain(
        ToolExecutionInput(call_id="c1", name="read_file", arguments={"path": 3})
    )
    assert (bad.outcome, bad.code) == ("invalid", "INVALID_ARGS")
    outside = registry.explain(
        ToolExecutionInput(call_id="c1", name="read_file", arguments={"path": "../x"})
    )
    assert outside.outcome == "invalid"
    assert "workspace" in (outside.reason or "")
    secret = registry.explain(
        ToolExecutionInput(call_id="c1", name="read_file", arguments={"path": "secrets/key"})
    )
    assert (secret.outcome, secret.code) == ("deny", "DENIED")
