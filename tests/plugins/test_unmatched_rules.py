"""Rules that cannot match (issue 23): a rule whose tool glob names no known tool, a typo
such as ``read-file``, loaded silently; its deny matched nothing, ``check`` said no
problems and ``explain`` said the call would run."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from dsh_tools import ToolRegistry, define_tool
from dsh_tools.cli import EXIT_CALL_FAILED, EXIT_OK, EXIT_PLUGINS, main
from dsh_tools_plugins.permissions import PermissionRules, Rule, default_rules, unmatched_rules
from sandbox_owner import give_away

TYPOS = ["read-file", "Read_File", " read_file", "read_file ", "readfile", "read_fiel*"]

RULES = """\
default = "allow"

[[rule]]
name = "no secrets"
action = "deny"
tool = "{tool}"
argument_equals = {{path = "secret.txt"}}

[[rule]]
action = "allow"
tool = ["grep", "glob*", "gerp"]
"""


def _rules(tool: str) -> PermissionRules:
    return PermissionRules.from_toml_text(RULES.format(tool=tool), "rules.toml")


@pytest.mark.parametrize("typo", TYPOS)
def test_a_tool_glob_that_names_no_known_tool_is_reported_with_its_place(typo: str) -> None:
    names = ["read_file", "grep", "glob", "list_dir"]
    problems = [str(problem) for problem in _rules(typo).unknown_tools(names)]
    assert problems == [
        f"rules.toml:3: rule #1 ('no secrets'): tool {typo!r} matches no known tool, so the "
        "rule never applies; did you mean 'read_file'?",
        "rules.toml:9: rule #2: tool 'gerp' matches no known tool; did you mean 'grep'?",
    ]


@pytest.mark.parametrize("glob", ["read_file", "read_*", "*", "[rg]*", "*_file"])
def test_a_glob_matching_a_known_tool_is_fine(glob: str) -> None:
    rules = PermissionRules([Rule("deny", glob)])
    assert rules.unknown_tools(["read_file", "grep"]) == []


def test_with_no_tool_every_glob_is_unknown_and_rules_without_a_file_have_no_line() -> None:
    [problem] = PermissionRules([Rule("deny", "*", name="all")]).unknown_tools([])
    assert (
        str(problem) == "rule #1 ('all'): tool '*' matches no known tool, so the rule never applies"
    )
    assert (problem.source, problem.line, problem.rule_index) == (None, None, 1)


def _tool(name: str) -> object:
    return define_tool(name=name, description="A tool.", parameters={}, execute=lambda a, c: "")


def test_the_registry_check_sees_tools_registered_after_the_rules() -> None:
    """Tools of plugins loaded later, or of an MCP server connected later, count: the
    check runs on what the registry shows when it is asked."""
    registry = ToolRegistry()
    registry.add_plugin(PermissionRules([Rule("deny", "remote.*")], source="r.toml"))
    registry.add_plugin(default_rules())  # names the reference tools, which are absent
    assert [str(p) for p in unmatched_rules(registry)] == [
        "r.toml: rule #1: tool 'remote.*' matches no known tool, so the rule never applies"
    ]
    registry.register(_tool("remote.search"))  # type: ignore[arg-type]
    assert unmatched_rules(registry) == []


# --------------------------------------------------------------------------- the command


@pytest.fixture
def rules_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    workspace = tmp_path / "ws"  # the rules file stays outside it
    workspace.mkdir()
    monkeypatch.setenv("DSH_TOOLS_WORKSPACE", str(workspace))
    monkeypatch.setenv("DSH_TOOLS_RULES", "")
    monkeypatch.delenv("DSH_TOOLS_BLOCK_PLUGINS", raising=False)
    (workspace / "secret.txt").write_text("hunter2\n")
    give_away(workspace)  # else a root host's check reports run_command refused
    path = tmp_path / "rules.toml"
    path.write_text(RULES.format(tool="read-file"), encoding="utf-8")
    return path


def _dsh(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdin=io.StringIO(""), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_check_fails_naming_the_rule(rules_file: Path) -> None:
    code, out, _ = _dsh("--rules", str(rules_file), "check")
    assert code == EXIT_CALL_FAILED
    assert (
        f"FAIL {rules_file}:3: rule #1 ('no secrets'): tool 'read-file' matches no known tool"
        in out
    )
    assert f"FAIL {rules_file}:9: rule #2: tool 'gerp'" in out


def test_loading_warns_and_strict_refuses(rules_file: Path) -> None:
    call = ("call", "read_file", '{"path": "secret.txt"}')
    code, _, err = _dsh("--rules", str(rules_file), *call)
    assert code == EXIT_OK  # the typo'd deny does not apply: the warning says why
    assert (
        f"dsh-tools: warning: {rules_file}:3: rule #1 ('no secrets'): tool 'read-file' "
        "matches no known tool, so the rule never applies; did you mean 'read_file'?\n" in err
    )
    code, out, err = _dsh("--rules", str(rules_file), "--strict", *call)
    assert code == EXIT_PLUGINS
    assert "hunter2" not in out
    assert "permission rules name tools that are not loaded (--strict)" in err


def test_a_rule_for_a_tool_that_did_not_load_is_reported(rules_file: Path) -> None:
    rules_file.write_text(RULES.format(tool="read_file").replace(', "gerp"', ""))
    assert _dsh("--rules", str(rules_file), "check")[0] == EXIT_OK
    code, out, _ = _dsh("--rules", str(rules_file), "--block", "workspace", "check")
    assert code == EXIT_CALL_FAILED
    assert "tool 'read_file' matches no known tool" in out


def test_explain_lists_the_rules_that_match_nothing(rules_file: Path) -> None:
    explain = ("--rules", str(rules_file), "explain", "read_file", '{"path": "secret.txt"}')
    code, plain, _ = _dsh(*explain)
    assert (code, plain) == (EXIT_OK, "would run\n")
    code, listed, _ = _dsh(*explain, "--unmatched-rules")
    assert code == EXIT_OK
    assert listed.splitlines()[1:] == [
        "permission rules that match no loaded tool:",
        f"  {rules_file}:3: rule #1 ('no secrets'): tool 'read-file' matches no known tool, "
        "so the rule never applies; did you mean 'read_file'?",
        f"  {rules_file}:9: rule #2: tool 'gerp' matches no known tool; did you mean 'grep'?",
    ]
    code, data, _ = _dsh(*explain, "--unmatched-rules", "--json")
    assert len(json.loads(data)["unmatchedRules"]) == 2
    rules_file.write_text(RULES.format(tool="read_file").replace(', "gerp"', ""))
    assert _dsh(*explain, "--unmatched-rules")[1].endswith(
        "every permission rule matches a loaded tool\n"
    )
