"""Host files: opened without following a link, regular files only, never inside a tree
that tools can write."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dsh_tools import _hostfiles as hostfiles
from dsh_tools._hostfiles import (
    WORKSPACE_ENV,
    HostFileError,
    check_host_file,
    open_host_file,
    open_unlinked,
    writable_trees,
)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 100)
    finally:
        os.close(fd)


def test_a_file_outside_the_trees_opens(tmp_path: Path, workspace: Path) -> None:
    (tmp_path / "rules.toml").write_text("x")
    fd = open_host_file(tmp_path / "rules.toml", what="the rules file", trees=[workspace])
    assert _read(fd) == b"x"


@pytest.mark.parametrize("where", ["rules.toml", "deep/er/rules.toml"])
def test_a_file_inside_a_tree_is_refused_with_where_to_keep_it(workspace: Path, where: str) -> None:
    path = workspace / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x")
    with pytest.raises(HostFileError) as info:
        open_host_file(path, what="the rules file", trees=[workspace])
    assert str(info.value).startswith(f"the rules file {path}: ")
    assert (
        f"it is inside {workspace}, which sandboxed commands and the file tools can write"
        in str(info.value)
    )
    assert "keep it outside the workspace" in str(info.value)


def test_another_spelling_of_the_tree_is_caught(tmp_path: Path, workspace: Path) -> None:
    (workspace / "rules.toml").write_text("x")
    alias = tmp_path / "alias"
    alias.symlink_to(workspace)
    # the tree given through a link, the file through the real path: same folder
    with pytest.raises(HostFileError, match=f"inside {alias} \\(reached as {workspace}\\), which"):
        check_host_file(workspace / "rules.toml", what="the rules file", trees=[alias])


def test_the_default_trees_are_the_workspace_or_the_current_directory(
    monkeypatch: pytest.MonkeyPatch, workspace: Path
) -> None:
    monkeypatch.setattr(hostfiles, "_handed", set())
    monkeypatch.delenv(WORKSPACE_ENV, raising=False)
    monkeypatch.chdir(workspace)
    assert writable_trees() == (str(workspace),)
    (workspace / "audit.jsonl").write_text("")
    with pytest.raises(HostFileError, match="can write"):
        open_host_file("audit.jsonl", what="the audit log")
    monkeypatch.setenv(WORKSPACE_ENV, "/nonexistent-ws")
    assert writable_trees("/x") == ("/nonexistent-ws", "/x")


def test_a_workspace_given_to_tools_is_a_writable_tree(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, workspace: Path
) -> None:
    """A library host hands tools a workspace and keeps its rules in it: refused, wherever
    the current directory is."""
    from dsh_tools_plugins.permissions import PermissionRules, RulesError
    from dsh_tools_plugins.tools import workspace_tools

    monkeypatch.setattr(hostfiles, "_handed", set())
    monkeypatch.delenv(WORKSPACE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    (workspace / "rules.toml").write_text('default = "deny"\n')
    (tmp_path / "rules.toml").write_text('default = "deny"\n')
    workspace_tools(workspace)
    assert writable_trees() == (str(workspace),)
    with pytest.raises(RulesError, match=f"it is inside {workspace}, which"):
        PermissionRules.from_toml(workspace / "rules.toml")
    assert PermissionRules.from_toml("rules.toml").default == "deny"  # cwd: not handed out


def test_a_link_at_the_last_component_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real.toml").write_text("x")
    (tmp_path / "rules.toml").symlink_to(tmp_path / "real.toml")
    for call in (open_host_file, check_host_file):
        with pytest.raises(HostFileError, match="is a symbolic link") as info:
            call(tmp_path / "rules.toml", what="the rules file", trees=())
        assert info.value.link == str(tmp_path / "rules.toml")


def test_a_parent_renamed_and_relinked_is_refused(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "rules.toml").write_text("x")
    (tmp_path / "conf").rename(tmp_path / "moved")
    (tmp_path / "conf").symlink_to("moved")  # a relative link, as a command would plant
    for call in (open_host_file, check_host_file):
        with pytest.raises(HostFileError) as info:
            call(tmp_path / "conf" / "rules.toml", what="the rules file", trees=())
        assert f"passes through {tmp_path}/conf, which is a symbolic link" in str(info.value)


def test_anything_but_a_regular_file_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")  # opening it must not block either
    (tmp_path / "dir").mkdir()
    for name in ("fifo", "dir"):
        with pytest.raises(HostFileError, match="is not a regular file"):
            open_host_file(tmp_path / name, what="the audit log", trees=())
        if name == "fifo":
            with pytest.raises(HostFileError, match="is not a regular file"):
                check_host_file(tmp_path / name, what="the audit log", trees=())


def test_missing_folders_are_made_with_the_mode_given(tmp_path: Path) -> None:
    path = tmp_path / "state" / "logs" / "audit.jsonl"
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    with pytest.raises(HostFileError, match="state: No such file or directory"):
        open_host_file(path, flags, what="the audit log", trees=())
    os.close(open_host_file(path, flags, what="the audit log", trees=(), make_parents=0o700))
    assert path.is_file()
    assert (path.parent.stat().st_mode & 0o777) == 0o700
    check_host_file(tmp_path / "new" / "store.sqlite3", what="x", trees=(), make_parents=0o700)
    assert (tmp_path / "new").is_dir()
    assert not (tmp_path / "new" / "store.sqlite3").exists()


def test_open_unlinked_finds_missing_paths_and_refuses_links(tmp_path: Path) -> None:
    assert open_unlinked(tmp_path / "missing" / "deeper", what="the path") is None
    fd = open_unlinked(tmp_path, what="the path")
    assert fd is not None
    os.close(fd)
    (tmp_path / "link").symlink_to(tmp_path)
    with pytest.raises(HostFileError) as info:
        open_unlinked(tmp_path / "link" / "x", what="the path")
    assert info.value.link == str(tmp_path / "link")


def test_a_sandbox_read_write_path_is_a_writable_tree(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from dsh_tools_plugins.sandbox import Sandbox, SandboxSettings

    monkeypatch.setattr(hostfiles, "_handed", set())
    monkeypatch.delenv(WORKSPACE_ENV, raising=False)
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "calls.jsonl").write_text("")
    Sandbox(SandboxSettings(read_write_paths=(str(shared),)))
    with pytest.raises(HostFileError, match=f"it is inside {shared}, which"):
        open_host_file(shared / "calls.jsonl", what="the audit log")
