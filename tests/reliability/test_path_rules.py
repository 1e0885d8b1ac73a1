"""Path rules judge the place a call touches, however the model spells it (issue 16, r02).

A ``path_prefix`` rule reads the path arguments each tool declares (``ToolPaths``),
resolved the way the tool resolves them: relative, absolute, ``/proc/self/root/...``,
``..`` and symlinked spellings of one file are one place; ``grep``'s ``include`` and
``glob``'s ``pattern`` are judged by what they can reach; what cannot be resolved is
denied by a deny rule and never allowed by an allow rule.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dsh_tools import (
    Allow,
    DefinitionError,
    PathArgument,
    ToolExecutionInput,
    ToolPaths,
    ToolRegistry,
    define_tool,
    hookimpl,
)
from dsh_tools._models import ToolExecution, ToolExecutionFailure, ToolExecutionResult
from dsh_tools_plugins.permissions import PermissionRules
from dsh_tools_plugins.tools import workspace_tools

SECRET = "sk-live-123"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace with ``secrets/key``, ``src/a.py``, ``docs/guide.md`` and the link
    ``docs/keys`` pointing at ``secrets``."""
    root = Path(os.path.realpath(tmp_path / "ws"))
    (root / "secrets").mkdir(parents=True)
    (root / "secrets" / "key").write_text(f"{SECRET}\n")
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("print('a')\n")
    (root / "docs").mkdir()
    (root / "docs" / "guide.md").write_text("# guide\n")
    (root / "docs" / "keys").symlink_to("../secrets")
    return root


class AllowEverything:
    """An earlier pre-execute policy that allows every call (firstresult skips the rules)."""

    @hookimpl
    def dsh_tools_pre_execute(self, execution: ToolExecution) -> Allow:
        return Allow()


def registry_for(root: Path, rules: str, *, allow_first: bool = False) -> ToolRegistry:
    """The workspace tools under ``rules``; with ``allow_first`` another policy allows
    every call before the rules see it, so only their guards can deny."""
    registry = ToolRegistry()
    for tool in workspace_tools(root, sandbox="off"):
        registry.register(tool)
    registry.add_plugin(PermissionRules.from_toml_text(rules))
    if allow_first:
        registry.add_plugin(AllowEverything())  # added last, so it runs first
    return registry


def deny_rule(prefix: str, *, guard: bool = False, tool: str = "*") -> str:
    enforce = 'enforce = "guard"\n' if guard else ""
    return (
        f'default = "allow"\n[[rule]]\nname = "no secrets"\naction = "deny"\n'
        f'tool = "{tool}"\npath_prefix = "{prefix}"\n{enforce}'
    )


def run(registry: ToolRegistry, name: str, **arguments: Any) -> ToolExecutionResult:
    return registry.execute_sync(ToolExecutionInput("c1", name, arguments))


def assert_denied_by_rule(result: ToolExecutionResult) -> None:
    assert isinstance(result, ToolExecutionFailure), result.text
    assert result.code == "DENIED", result.text
    assert "'no secrets'" in result.error.message, result.error.message
    assert SECRET not in result.text


SPELLINGS: list[Callable[[Path], str]] = [
    lambda root: "secrets/key",
    lambda root: f"{root}/secrets/key",
    lambda root: f"/proc/self/root{root}/secrets/key",
]


# --------------------------------------------------------------------------- r02


@pytest.mark.parametrize("guard", [False, True], ids=["policy", "guard"])
@pytest.mark.parametrize("absolute_prefix", [False, True], ids=["relative-rule", "absolute-rule"])
@pytest.mark.parametrize("spelling", SPELLINGS, ids=["relative", "absolute", "proc-root"])
def test_every_spelling_of_a_denied_file_is_denied(
    workspace: Path, spelling: Callable[[Path], str], absolute_prefix: bool, guard: bool
) -> None:
    prefix = f"{workspace}/secrets" if absolute_prefix else "secrets"
    registry = registry_for(workspace, deny_rule(prefix, guard=guard), allow_first=guard)
    assert_denied_by_rule(run(registry, "read_file", path=spelling(workspace)))


def test_the_rule_does_not_deny_what_lies_outside_its_prefix(workspace: Path) -> None:
    registry = registry_for(workspace, deny_rule("secrets", guard=True), allow_first=True)
    for path in ("src/a.py", f"{workspace}/src/a.py", f"/proc/self/root{workspace}/src/a.py"):
        result = run(registry, "read_file", path=path)
        assert not result.is_error, result.text
    (workspace / "secretsx").mkdir()
    (workspace / "secretsx" / "f").write_text("x\n")
    assert not run(registry, "read_file", path="secretsx/f").is_error


@pytest.mark.parametrize(
    "path",
    [
        "src/../secrets/key",
        "./secrets//key",
        "src/./../secrets/./key",
        "secrets/../secrets/key",
        "{root}/src/../secrets/key",
        "/proc/self/root{root}/docs/../secrets/key",
    ],
)
def test_dot_dot_spellings_are_folded_as_the_tool_folds_them(workspace: Path, path: str) -> None:
    registry = registry_for(workspace, deny_rule("secrets"))
    assert_denied_by_rule(run(registry, "read_file", path=path.format(root=workspace)))


def test_a_link_inside_the_workspace_is_followed_by_the_rules(workspace: Path) -> None:
    # the tools refuse links anyway; the rule must see where the link leads regardless
    for guard in (False, True):
        registry = registry_for(workspace, deny_rule("secrets", guard=guard), allow_first=guard)
        assert_denied_by_rule(run(registry, "read_file", path="docs/keys/key"))
        assert_denied_by_rule(run(registry, "list_dir", path="docs/keys"))
        assert_denied_by_rule(run(registry, "grep", pattern="sk", path="docs/keys"))
        assert_denied_by_rule(run(registry, "glob", pattern="*", path="docs/keys"))
        assert_denied_by_rule(run(registry, "write_file", path="docs/keys/key", content="x"))


def test_a_rule_on_a_link_covers_the_place_it_leads_to(workspace: Path) -> None:
    registry = registry_for(workspace, deny_rule("docs/keys"))
    assert_denied_by_rule(run(registry, "read_file", path="secrets/key"))
    assert not run(registry, "read_file", path="docs/guide.md").is_error


# --------------------------------------------------------------------------- searches


@pytest.mark.parametrize("guard", [False, True], ids=["policy", "guard"])
@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("grep", {"pattern": "sk", "include": "secrets/*"}),
        ("grep", {"pattern": "sk", "include": "secrets/key"}),
        ("grep", {"pattern": "sk", "include": "./secrets/*"}),
        ("grep", {"pattern": "sk", "path": "secrets"}),
        ("grep", {"pattern": "sk", "path": "secrets/key"}),
        ("grep", {"pattern": "sk"}),  # the whole workspace reaches secrets/
        ("grep", {"pattern": "sk", "include": "*"}),  # a name pattern matches anywhere
        ("grep", {"pattern": "sk", "include": "**/key"}),
        ("grep", {"pattern": "sk", "include": "sec*/key"}),
        ("glob", {"pattern": "secrets/*"}),
        ("glob", {"pattern": "./secrets/**"}),
        ("glob", {"pattern": "*", "path": "secrets"}),
        ("glob", {"pattern": "**/key"}),
        ("glob", {"pattern": "{secrets,src}/*"}),
        ("list_dir", {"path": "secrets"}),
        ("run_command", {"argv": ["cat", "key"], "cwd": "secrets"}),
    ],
)
def test_searches_that_can_reach_a_denied_directory_are_denied(
    workspace: Path, name: str, arguments: dict[str, Any], guard: bool
) -> None:
    registry = registry_for(workspace, deny_rule("secrets", guard=guard), allow_first=guard)
    assert_denied_by_rule(run(registry, name, **arguments))


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("grep", {"pattern": "print", "path": "src"}),
        ("grep", {"pattern": "print", "include": "src/*.py"}),
        ("grep", {"pattern": "print", "path": "src", "include": "secrets/*"}),  # finds nothing
        ("glob", {"pattern": "src/*.py"}),
        ("glob", {"pattern": "*.py", "path": "src"}),
        ("glob", {"pattern": "docs/*"}),
        ("list_dir", {"path": "."}),  # lists the name secrets/, reads nothing in it
        ("run_command", {"argv": ["true"]}),
    ],
)
def test_searches_that_cannot_reach_it_run(
    workspace: Path, name: str, arguments: dict[str, Any]
) -> None:
    registry = registry_for(workspace, deny_rule("secrets", guard=True), allow_first=True)
    result = run(registry, name, **arguments)
    assert not result.is_error, result.text
    assert SECRET not in result.text


# --------------------------------------------------------------------------- allow rules

ALLOW_SRC = """\
default = "deny"
[[rule]]
name = "read src"
action = "allow"
tool = ["read_file", "grep", "glob", "list_dir"]
path_prefix = "src"
"""


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("read_file", {"path": "src/../secrets/key"}),
        ("read_file", {"path": "secrets/key"}),
        ("grep", {"pattern": "sk"}),  # the workspace root is not inside src/
        ("grep", {"pattern": "sk", "include": "src/*"}),  # the root it opens is not either
        ("glob", {"pattern": "src/../secrets/*"}),  # the tool refuses "..": unresolved
        ("list_dir", {"path": "."}),
    ],
)
def test_an_allow_rule_never_matches_a_place_outside_its_prefix(
    workspace: Path, name: str, arguments: dict[str, Any]
) -> None:
    (workspace / "srcx").mkdir()
    registry = registry_for(workspace, ALLOW_SRC)
    result = run(registry, name, **arguments)
    assert isinstance(result, ToolExecutionFailure)
    assert result.code == "DENIED"
    assert "not allowed by the permission rules" in result.error.message


@pytest.mark.parametrize(
    ("arguments", "code", "message"),
    [
        ({"path": "/etc/passwd"}, "DENIED", "is outside the workspace"),
        ({"path": "src/../../outside"}, "DENIED", "escapes the workspace"),
        ({"path": 7}, "INVALID_ARGS", "path"),
    ],
)
def test_a_call_no_rule_allows_that_could_not_run_anyway_says_why(
    workspace: Path, arguments: dict[str, Any], code: str, message: str
) -> None:
    """Not allowed, and not a place the tool can open (or not a path at all): the model
    reads the error it can correct from, and nothing runs either way."""
    registry = registry_for(workspace, ALLOW_SRC)
    result = run(registry, "read_file", **arguments)
    assert isinstance(result, ToolExecutionFailure)
    assert (result.code, message in result.error.message) == (code, True), result.text


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("read_file", {"path": "src/a.py"}),
        ("read_file", {"path": "{root}/src/a.py"}),
        ("read_file", {"path": "docs/../src/a.py"}),
        ("grep", {"pattern": "print", "path": "src"}),
        ("grep", {"pattern": "print", "path": "src", "include": "*.py"}),
        ("glob", {"pattern": "*.py", "path": "src"}),
        ("list_dir", {"path": "src"}),
    ],
)
def test_an_allow_rule_matches_every_spelling_inside_its_prefix(
    workspace: Path, name: str, arguments: dict[str, Any]
) -> None:
    registry = registry_for(workspace, ALLOW_SRC)
    arguments = {k: v.format(root=workspace) for k, v in arguments.items()}
    result = run(registry, name, **arguments)
    assert not result.is_error, result.text


def test_a_link_out_of_an_allowed_directory_is_not_allowed(workspace: Path) -> None:
    rules = ALLOW_SRC.replace('path_prefix = "src"', 'path_prefix = "docs"')
    registry = registry_for(workspace, rules)
    assert not run(registry, "read_file", path="docs/guide.md").is_error
    result = run(registry, "read_file", path="docs/keys/key")
    assert isinstance(result, ToolExecutionFailure)
    assert "not allowed by the permission rules" in result.error.message


# --------------------------------------------------------------------------- third-party tools


def copy_tool(paths: ToolPaths | None) -> Any:
    def copy(args: Any, ctx: Any) -> str:
        Path(args["target"]).write_text(Path(args["source"]).read_text())
        return "copied"

    return define_tool(
        name="copy",
        description="Copy a file",
        parameters={"source": {"type": "string"}, "target": {"type": "string"}},
        execute=copy,
        paths=paths,
    )


def test_a_third_party_tool_declares_its_own_path_arguments(tmp_path: Path) -> None:
    root = Path(os.path.realpath(tmp_path))
    (root / "secrets").mkdir()
    (root / "secrets" / "key").write_text(SECRET)
    (root / "public").mkdir()
    (root / "public" / "notes").write_text("notes")
    (root / "alias").symlink_to(root / "secrets")
    declared = ToolPaths((PathArgument("source", "file"), PathArgument("target", "file")))
    registry = ToolRegistry()
    registry.register(copy_tool(declared))
    registry.add_plugin(PermissionRules.from_toml_text(deny_rule(f"{root}/secrets")))

    for source in (f"{root}/secrets/key", f"{root}/alias/key", f"{root}/public/../secrets/key"):
        result = run(registry, "copy", source=source, target=f"{root}/public/out")
        assert_denied_by_rule(result)
    assert not (root / "public" / "out").exists()
    assert_denied_by_rule(
        run(registry, "copy", source=f"{root}/public/notes", target=f"{root}/alias/new")
    )
    assert not (root / "secrets" / "new").exists()
    result = run(registry, "copy", source=f"{root}/public/notes", target=f"{root}/public/out")
    assert result.text == "copied"


def test_a_tool_that_declares_nothing_is_judged_by_the_rule_argument(tmp_path: Path) -> None:
    root = Path(os.path.realpath(tmp_path))
    (root / "secrets").mkdir()
    (root / "secrets" / "key").write_text(SECRET)
    registry = ToolRegistry()
    registry.register(copy_tool(None))
    rules = deny_rule(f"{root}/secrets") + 'argument = "source"\n'
    registry.add_plugin(PermissionRules.from_toml_text(rules))
    result = run(registry, "copy", source=f"{root}/secrets/key", target=f"{root}/out")
    assert_denied_by_rule(result)
    # the text of the one named argument, as written: the declaration is what resolves
    result = run(registry, "copy", source=f"{root}/x/../secrets/key", target=f"{root}/out")
    assert_denied_by_rule(result)
    result = run(registry, "copy", source=f"/proc/self/root{root}/secrets/key", target=f"{root}/o")
    assert not result.is_error


def test_a_resolver_that_raises_fails_closed(tmp_path: Path) -> None:
    def refuse(text: str) -> str:
        raise OSError("cannot tell")

    registry = ToolRegistry()
    registry.register(copy_tool(ToolPaths((PathArgument("source", "file"),), resolve=refuse)))
    registry.add_plugin(PermissionRules.from_toml_text(deny_rule("/nowhere")))
    result = run(registry, "copy", source=str(tmp_path), target=str(tmp_path))
    # The call does not run, and the model reads why its path could not be judged.
    assert isinstance(result, ToolExecutionFailure)
    assert "cannot tell" in result.error.message


@pytest.mark.parametrize(
    ("paths", "message"),
    [
        (lambda: ToolPaths((PathArgument("nope", "file"),)), "not one of its parameters"),
        (lambda: ToolPaths((PathArgument("source", "file"),) * 2), "twice"),
        (lambda: ToolPaths((PathArgument("source", "glob"),)), "kind must be one of"),  # type: ignore[arg-type]
        (lambda: ToolPaths((PathArgument("source", "pattern"),)), "needs within="),
        (
            lambda: ToolPaths(
                (PathArgument("source", "file"), PathArgument("target", "pattern", within="source"))
            ),
            'must name a "tree" argument',
        ),
        (lambda: ToolPaths((PathArgument("source", "file", relative_to="x"),)), "relative_to="),
        (lambda: ToolPaths(("source",)), "must be a PathArgument"),  # type: ignore[arg-type]
        (lambda: ToolPaths((PathArgument("", "file"),)), "non-empty string"),
    ],
)
def test_a_malformed_declaration_is_a_definition_error(
    paths: Callable[[], ToolPaths], message: str
) -> None:
    with pytest.raises(DefinitionError, match=message):
        copy_tool(paths())
