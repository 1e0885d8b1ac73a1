"""``load_plugins(registry, workspace=..., rules=...)``: a library host configures the
first-party entry points with arguments, so two registries of one process serve two
workspaces under two rule sets; what it does not give still comes from the environment
(the command line's way)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh_tools import ToolExecutionInput, ToolRegistry
from dsh_tools._plugins.loading import load_plugins
from dsh_tools._plugins.settings import plugin_settings
from dsh_tools.errors import PluginConfigError

ONLY = ["workspace", "default_permissions", "limits", "budgets", "cache"]


@pytest.fixture(autouse=True)
def no_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("WORKSPACE", "RULES", "SANDBOX", "NETWORK", "BLOCK_PLUGINS"):
        monkeypatch.delenv(f"DSH_TOOLS_{name}", raising=False)
    monkeypatch.chdir(tmp_path)


def workspace(root: Path, text: str) -> Path:
    root.mkdir()
    (root / "notes.txt").write_text(text)
    return root


def read(registry: ToolRegistry, path: str = "notes.txt") -> str:
    call = ToolExecutionInput("c1", "read_file", {"path": path}, agent="me")
    result = registry.execute_sync(call)
    if result.is_error:
        return f"error: {result.error.message}"
    return result.text.partition("\t")[2]  # the line, without its number


def test_two_registries_of_one_process_serve_two_workspaces_under_their_own_rules(
    tmp_path: Path,
) -> None:
    first = workspace(tmp_path / "first", "one")
    second = workspace(tmp_path / "second", "two")
    rules = tmp_path / "rules.toml"
    rules.write_text(
        'default = "deny"\n\n[[rule]]\nname = "notes only"\naction = "allow"\n'
        'tool = "read_file"\npath_prefix = "notes.txt"\n'
    )
    (second / "other.txt").write_text("other")
    strict, plain = ToolRegistry(), ToolRegistry()
    load_plugins(strict, workspace=first, rules=rules, only=ONLY)
    load_plugins(plain, workspace=second, only=ONLY)
    assert read(strict) == "one"
    assert read(plain) == "two"
    assert read(plain, "other.txt") == "other"  # the built-in rules: reading runs
    (first / "other.txt").write_text("hidden")
    assert read(strict, "other.txt").startswith("error: ")  # only its own rules deny it
    assert plugin_settings().workspace is None  # nothing stays set after loading


def test_what_is_not_given_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = workspace(tmp_path / "env", "from the environment")
    monkeypatch.setenv("DSH_TOOLS_WORKSPACE", str(root))
    registry = ToolRegistry()
    load_plugins(registry, only=ONLY)
    assert read(registry) == "from the environment"
    given = workspace(tmp_path / "given", "given")
    other = ToolRegistry()
    load_plugins(other, workspace=given, only=ONLY)
    assert read(other) == "given"  # an argument wins over the environment


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"workspace": "missing"}, "load_plugins(workspace='missing'): not a directory"),
        ({"rules": "missing.toml"}, "load_plugins(rules='missing.toml'): not a file"),
        (
            {"sandbox": "sometimes"},
            "load_plugins(sandbox='sometimes'): expected one of auto, required, off",
        ),
        ({"network": "on"}, "load_plugins(network='on'): expected True or False"),
    ],
)
def test_a_bad_setting_is_refused_before_anything_loads(
    arguments: dict[str, object], problem: str
) -> None:
    registry = ToolRegistry()
    with pytest.raises(PluginConfigError) as raised:
        load_plugins(registry, **arguments, only=ONLY)  # type: ignore[arg-type]
    assert str(raised.value) == problem
    assert registry.names() == []


def test_the_sandbox_given_configures_run_command(tmp_path: Path) -> None:
    from dsh_tools.bridges.mcp import mcp_tools

    pytest.importorskip("mcp")
    root = workspace(tmp_path / "ws", "")
    offline, online = ToolRegistry(), ToolRegistry()
    load_plugins(offline, workspace=root, sandbox="required", network=False, only=ONLY)
    load_plugins(online, workspace=root, sandbox="required", network=True, only=ONLY)
    hints = {
        name: {tool.name: tool.annotations for tool in mcp_tools(registry)}["run_command"]
        for name, registry in (("offline", offline), ("online", online))
    }
    assert hints["offline"] is not None
    assert hints["offline"].open_world_hint is False
    assert hints["online"] is not None
    assert hints["online"].open_world_hint is True
