"""Install hints: every command that needs an extra says how to install it in the same
words (the extra's name and the line for a clone)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from dsh_tools.cli import EXIT_USAGE, main

INSTALL = "needs the mcp extra: install dsh-tools with it (in a clone: pip install '.[mcp]')"


@pytest.mark.parametrize(
    ("argv", "blocked", "what"),
    [
        (["approvals", "serve"], "dsh_tools.cli._inbox", "the inbox (approvals serve)"),
        (["serve-mcp"], "dsh_tools.bridges.mcp", "serve-mcp"),
    ],
)
def test_a_missing_mcp_extra_is_named_with_the_install_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str], blocked: str, what: str
) -> None:
    monkeypatch.setitem(sys.modules, blocked, None)  # importing it raises ImportError
    monkeypatch.setenv("DSH_TOOLS_RULES", "")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    out, err = io.StringIO(), io.StringIO()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    code = main(
        ["--workspace", str(workspace), "--no-plugins", *argv],
        stdin=io.StringIO(""),
        stdout=out,
        stderr=err,
    )
    assert code == EXIT_USAGE
    assert err.getvalue().startswith(f"dsh-tools: error: {what} {INSTALL} (")
