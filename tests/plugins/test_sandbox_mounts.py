"""An extra mount's destination raced while the sandbox starts: a folder above it is
swapped for a link after the host opened the path and before bubblewrap mounts it (as a
command running at the same time in the same workspace could). The command must not
start, and the protected folder must stay out of its reach."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from command_calls import command_registry, ok, run

from dsh_tools_plugins import sandbox as sandbox_module
from dsh_tools_plugins.sandbox import Sandbox, SandboxSettings
from sandbox_owner import give_away

_STATE = Sandbox("auto").state()
needs_sandbox = pytest.mark.skipif(not _STATE.sandboxed, reason=f"no sandbox here: {_STATE.reason}")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    hooks = workspace / ".git" / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    (workspace / "decoy").mkdir()
    give_away(workspace)
    return workspace


def _swap_before_bwrap(monkeypatch: pytest.MonkeyPatch, swap: Callable[[], None]) -> None:
    """Run ``swap`` once the host has opened the extra paths, before bwrap starts."""
    real = sandbox_module.jail_arguments

    def jail_arguments(*args: Any, **kwargs: Any) -> list[str]:
        swap()
        return real(*args, **kwargs)

    monkeypatch.setattr(sandbox_module, "jail_arguments", jail_arguments)


@needs_sandbox
def test_a_parent_swapped_for_a_link_while_the_sandbox_starts_stops_the_call(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bwrap follows the link and mounts the folder read-only at ``decoy/hooks``; its real
    place, ``.git-real/hooks`` now, would stay writable."""
    hooks = root / ".git" / "hooks"
    registry = command_registry(
        root, sandbox=SandboxSettings(mode="required", read_only_paths=[hooks])
    )
    assert ok(registry, command="touch .git/hooks/x").value["exit_code"] != 0

    def swap() -> None:
        os.rename(root / ".git", root / ".git-real")
        os.symlink("decoy", root / ".git")

    _swap_before_bwrap(monkeypatch, swap)
    refused = run(registry, command="echo pwned > .git-real/hooks/pre-commit; touch ran")
    assert refused.code == "TOOL_ERROR"
    assert refused.text == (
        f"Error: the sandbox's read-only path {hooks} was not mounted at its place (a "
        "folder above it was moved or replaced by a link while the sandbox started, "
        "perhaps by another command); the command did not run"
    )
    assert not (root / "ran").exists()
    assert (root / ".git-real" / "hooks" / "pre-commit").read_text() == "#!/bin/sh\nexit 0\n"


@needs_sandbox
def test_extra_mounts_in_place_pass_the_check(root: Path, tmp_path: Path) -> None:
    """Read-only and read-write paths, folders and a file, inside the workspace and out."""
    cache = tmp_path / "cache"
    cache.mkdir()
    makefile = root / "Makefile"
    makefile.write_text("all:\n")
    give_away(cache, makefile)
    settings = SandboxSettings(
        mode="required",
        read_only_paths=[root / ".git" / "hooks", makefile],
        read_write_paths=[cache],
    )
    registry = command_registry(root, sandbox=settings)
    ran = ok(registry, command=f"cat .git/hooks/pre-commit Makefile && touch {cache}/hit")
    assert ran.value["exit_code"] == 0, ran.text
    assert (cache / "hit").exists()
