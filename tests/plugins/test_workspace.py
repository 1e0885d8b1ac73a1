"""Workspace confinement: lexical escapes, absolute paths, symlinks, and swap races."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import pytest

import dsh_tools_plugins.workspace as workspace_module
from dsh_tools import ErrorCode, ToolError, ToolExecutionInput, ToolRegistry
from dsh_tools_plugins.tools import workspace_tools
from dsh_tools_plugins.workspace import Workspace


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "sub" / "file.txt").write_text("inside\n")
    (workspace / "top.txt").write_text("top\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "file.txt").write_text("secret\n")
    return workspace


def _denied(excinfo: pytest.ExceptionInfo[ToolError]) -> str:
    assert excinfo.value.code == ErrorCode.DENIED.value
    return excinfo.value.message


def test_relative_and_absolute_paths_inside_resolve(root: Path) -> None:
    ws = Workspace(root)
    assert ws.resolve("sub/file.txt") == root / "sub" / "file.txt"
    assert ws.resolve(str(root / "sub" / "file.txt")) == root / "sub" / "file.txt"
    assert ws.resolve("./sub/../top.txt") == root / "top.txt"
    assert ws.resolve(".") == root
    assert ws.resolve(str(root)) == root
    assert ws.display(root / "sub" / "file.txt") == "sub/file.txt"
    assert ws.display(root) == "."


def test_locate_names_the_place_the_tools_open_however_it_is_spelled(root: Path) -> None:
    ws = Workspace(root)
    real = str(ws.root / "sub" / "file.txt")
    spellings = ["sub/file.txt", "./sub//file.txt", "top.txt/../sub/file.txt", real]
    if os.path.isdir("/proc/self/root"):
        spellings.append(f"/proc/self/root{real}")
    assert {ws.locate(spelling) for spelling in spellings} == {real}
    assert ws.locate("missing/new") == str(ws.root / "missing" / "new")  # need not exist
    (root / "link").symlink_to("sub")
    assert ws.locate("link/file.txt") == str(ws.root / "link" / "file.txt")  # not followed
    with pytest.raises(ToolError) as info:
        ws.locate("../outside/file.txt")
    _denied(info)
    declared = ws.tool_paths()
    assert declared.resolve("sub") == str(ws.root / "sub")


def test_missing_paths(root: Path) -> None:
    ws = Workspace(root)
    with pytest.raises(ToolError, match=r'^"nope" does not exist$') as info:
        ws.resolve("nope/x.txt")
    assert info.value.code == ErrorCode.TOOL_ERROR.value
    assert ws.resolve("nope/x.txt", must_exist=False) == root / "nope" / "x.txt"
    with pytest.raises(ToolError, match=r'^"top\.txt" is not a directory$'):
        ws.resolve("top.txt/x", must_exist=False)


@pytest.mark.parametrize("path", ["..", "../outside/file.txt", "sub/../../outside", "a/../.."])
def test_dotdot_escapes_are_denied(root: Path, path: str) -> None:
    with pytest.raises(ToolError) as info:
        Workspace(root).resolve(path, must_exist=False)
    assert 'escapes the workspace through ".."' in _denied(info)


def test_absolute_paths_outside_are_denied(root: Path) -> None:
    ws = Workspace(root)
    outside = str(root.parent / "outside" / "file.txt")
    for path in ("/etc/passwd", "//etc/passwd", outside, "/" + outside, str(root) + "x"):
        with pytest.raises(ToolError) as info:
            ws.resolve(path)
        assert "is outside the workspace" in _denied(info)
    with pytest.raises(ToolError) as info:
        ws.resolve(str(root / ".." / "outside"))
    _denied(info)


def test_root_named_through_a_symlinked_prefix(root: Path, tmp_path: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(root)
    ws = Workspace(alias)
    assert ws.root == root
    assert ws.resolve(str(alias / "top.txt")) == root / "top.txt"


@pytest.mark.parametrize(
    ("link", "target"),
    [
        ("escape", "../outside"),  # a directory link out of the root
        ("escape.txt", "../outside/file.txt"),  # a final-component link out of the root
        ("inner.txt", "top.txt"),  # even a link that stays inside is not followed
    ],
)
def test_symlinks_are_refused_at_every_component(root: Path, link: str, target: str) -> None:
    (root / link).symlink_to(target)
    ws = Workspace(root)
    for path in (link, f"{link}/file.txt", str(root / link)):
        with pytest.raises(ToolError) as info:
            ws.resolve(path, must_exist=False)
        assert "is a symbolic link" in _denied(info)
    with pytest.raises(ToolError) as info:
        ws.open(link)
    _denied(info)


def test_symlink_in_the_middle_of_a_path(root: Path) -> None:
    (root / "sub" / "hop").symlink_to(root.parent / "outside")
    with pytest.raises(ToolError) as info:
        Workspace(root).open("sub/hop/file.txt")
    assert '"sub/hop" is a symbolic link' in _denied(info)


def test_nul_and_root_checks(root: Path) -> None:
    with pytest.raises(ToolError) as info:
        Workspace(root).resolve("a\x00b")
    _denied(info)
    with pytest.raises(ValueError, match="is not a directory"):
        Workspace(root / "top.txt")


def test_open_kinds(root: Path) -> None:
    ws = Workspace(root)
    with ws.open("sub/file.txt") as opened:
        assert os.read(opened.fd, 100) == b"inside\n"
        assert opened.display == "sub/file.txt"
    with pytest.raises(ToolError, match="is a directory, not a file"):
        ws.open("sub")
    with pytest.raises(ToolError, match="is not a directory"):
        ws.open("top.txt", directory=True)
    os.mkfifo(root / "pipe")
    with pytest.raises(ToolError, match='"pipe" is not a regular file'):
        ws.open("pipe")  # never blocks waiting for a writer


def _swap_after_resolve(
    monkeypatch: pytest.MonkeyPatch, root: Path, directory: str = "sub"
) -> list[str]:
    """Swap ``root/directory`` for a symlink to ../outside right after the check."""
    original = Workspace.resolve
    swapped: list[str] = []

    def resolve_then_swap(self: Workspace, path: object, *, must_exist: bool = True) -> Path:
        result = original(self, path, must_exist=must_exist)  # type: ignore[arg-type]
        if not swapped:
            (root / directory).rename(root / f"{directory}.moved")
            (root / directory).symlink_to(root.parent / "outside")
            swapped.append(directory)
        return result

    monkeypatch.setattr(Workspace, "resolve", resolve_then_swap)
    return swapped


def test_swap_between_check_and_open_is_refused(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    swapped = _swap_after_resolve(monkeypatch, root)
    with pytest.raises(ToolError) as info:
        Workspace(root).open("sub/file.txt")
    assert swapped == ["sub"]
    assert '"sub" is a symbolic link' in _denied(info)  # the O_NOFOLLOW walk caught it


def test_post_open_verification_refuses_a_swap_the_walk_missed(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Simulate a platform without O_NOFOLLOW: the walk follows the swapped link and opens
    # the outside file; the post-open check must still refuse it.
    monkeypatch.setattr(workspace_module, "_NOFOLLOW", 0)
    swapped = _swap_after_resolve(monkeypatch, root)
    with pytest.raises(ToolError) as info:
        Workspace(root).open("sub/file.txt")
    assert swapped == ["sub"]
    message = _denied(info)
    assert "outside the workspace" in message or "changed while it was opened" in message


def test_post_open_verification_protects_writes(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workspace_module, "_NOFOLLOW", 0)
    _swap_after_resolve(monkeypatch, root)
    with pytest.raises(ToolError) as info:
        Workspace(root).open_for_write("sub/file.txt")
    _denied(info)
    assert (root.parent / "outside" / "file.txt").read_text() == "secret\n"  # not truncated


def test_walk_skips_links_and_git(root: Path) -> None:
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("x")
    (root / "linked").symlink_to(root.parent / "outside")
    (root / "linked.txt").symlink_to(root.parent / "outside" / "file.txt")
    ws = Workspace(root)
    with ws.open(".", directory=True) as base:
        found = [item.display for item in ws.walk_files(base)]
    assert found == ["sub/file.txt", "top.txt"]


def test_registry_calls_are_denied_with_the_denied_code(root: Path) -> None:
    (root / "escape").symlink_to(root.parent / "outside")
    registry = ToolRegistry()
    for tool in workspace_tools(root):
        registry.register(tool)
    calls = [
        ("read_file", {"path": "../outside/file.txt"}),
        ("read_file", {"path": str(root.parent / "outside" / "file.txt")}),
        ("read_file", {"path": "escape/file.txt"}),
        ("write_file", {"path": "escape/new.txt", "content": "x"}),
        ("edit_file", {"path": "escape/file.txt", "old_string": "secret", "new_string": "x"}),
        ("list_dir", {"path": "escape"}),
        ("glob", {"pattern": "*", "path": ".."}),
        ("grep", {"pattern": "secret", "path": "escape"}),
        ("run_command", {"argv": ["true"], "cwd": "escape"}),
    ]
    for name, arguments in calls:
        result = registry.execute_sync(ToolExecutionInput("c", name, arguments))
        assert result.is_error, (name, arguments)
        assert result.code == "DENIED", (name, result.text)
        assert result.text.startswith("Error: ")
    assert (root.parent / "outside" / "file.txt").read_text() == "secret\n"
    assert not (root.parent / "outside" / "new.txt").exists()


def test_workspace_tools_root_from_environment(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSH_TOOLS_WORKSPACE", str(root))
    tools = workspace_tools()
    assert [tool.name for tool in tools] == [
        "read_file",
        "write_file",
        "edit_file",
        "list_dir",
        "glob",
        "grep",
        "run_command",
    ]
    registry = ToolRegistry()
    for tool in tools:
        registry.register(tool)
    result = registry.execute_sync(ToolExecutionInput("c", "read_file", {"path": "top.txt"}))
    assert result.text == "     1\ttop"
    monkeypatch.delenv("DSH_TOOLS_WORKSPACE")
    monkeypatch.chdir(root / "sub")
    registry = ToolRegistry()
    for tool in workspace_tools():
        registry.register(tool)
    result = registry.execute_sync(ToolExecutionInput("c", "read_file", {"path": "file.txt"}))
    assert result.text == "     1\tinside"


# --------------------------------------------------------------------------- cost


def _file_system_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Count every call the workspace (and ``os.path.realpath``) makes into the OS."""
    calls: list[str] = []
    for name in ("lstat", "stat", "open", "fstat", "readlink", "scandir"):
        original = getattr(os, name)

        def counted(*args: Any, _name: str = name, _original: Any = original, **kw: Any) -> Any:
            calls.append(_name)
            return _original(*args, **kw)

        monkeypatch.setattr(os, name, counted)
    return calls


@pytest.mark.parametrize("kind", ["missing outside", "through an alias", "inside with .."])
def test_resolving_a_path_costs_work_linear_in_its_length(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    deep = root.joinpath(*(["d"] * 80))
    deep.mkdir(parents=True)
    (deep / "f.txt").write_text("deep\n")
    alias = tmp_path / "alias"
    alias.symlink_to(root)
    ws = Workspace(alias)

    def path(depth: int) -> str:
        if kind == "missing outside":
            return "/x/" + "a/" * depth
        if kind == "through an alias":
            return str(alias) + "/d" * depth + ("/f.txt" if depth == 80 else "")
        return "sub/../" * depth + "top.txt"

    def cost(depth: int) -> int:
        calls = _file_system_calls(monkeypatch)
        with contextlib.suppress(ToolError):
            ws.open(path(depth)).close()
        monkeypatch.undo()
        return len(calls)

    short, long = cost(20), cost(80)
    assert long <= 4 * short + 8, (short, long)  # quadratic work gives ~16x


def test_a_very_long_path_outside_is_denied_with_the_usual_message(root: Path) -> None:
    registry = ToolRegistry()
    for tool in workspace_tools(root):
        registry.register(tool)
    path = "/x/" + "a/" * 4000
    result = registry.execute_sync(ToolExecutionInput("c", "read_file", {"path": path}))
    assert result.code == "DENIED"
    assert result.text == f'Error: path "{path}" is outside the workspace {root}'


# --------------------------------------------------------------------------- the root itself


def test_a_root_replaced_by_a_symlink_is_refused_before_anything_is_created(
    root: Path, tmp_path: Path
) -> None:
    registry = ToolRegistry()
    for tool in workspace_tools(root):
        registry.register(tool)
    root.rename(tmp_path / "moved")
    root.symlink_to(tmp_path / "outside")  # the root path now leads outside

    for name, arguments in [
        ("write_file", {"path": "made/by/write.txt", "content": "x"}),
        ("read_file", {"path": "file.txt"}),
        ("list_dir", {"path": "."}),
    ]:
        result = registry.execute_sync(ToolExecutionInput("c", name, arguments))
        assert result.code == "DENIED", (name, result.text)
        assert result.text == (
            f"Error: the workspace root {root} is no longer the directory the tools "
            "started with (it was moved, removed or replaced)"
        )
    assert sorted(p.name for p in (tmp_path / "outside").iterdir()) == ["file.txt"]
    assert (tmp_path / "outside" / "file.txt").read_text() == "secret\n"
