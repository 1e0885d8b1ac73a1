"""Who a sandboxed command runs as. On a root host (these tests run as root here and in
CI) never the host's root user unless the host says so: the workspace's owner, or the
``[sandbox] user`` setting; a workspace that root owns is refused with both fixes."""

from __future__ import annotations

import os
import pwd
from pathlib import Path
from typing import Any

import pytest
from command_calls import command_registry, ok, run

from dsh_tools_plugins.permissions import PermissionRules, RulesError
from dsh_tools_plugins.sandbox import Sandbox, SandboxSettings
from sandbox_owner import UNPRIVILEGED, give_away, reachable

_STATE = Sandbox("auto").state()
needs_root_sandbox = pytest.mark.skipif(
    not _STATE.sandboxed or os.geteuid() != 0,
    reason=f"needs a root host with a sandbox (sandbox: {_STATE.reason or 'yes'})",
)

_REFUSAL = (
    "Error: the host runs as root and the workspace belongs to root, so sandboxed commands "
    "would run as the host's root user: give the workspace to an unprivileged user "
    '(chown), or name one in the sandbox settings ([sandbox] user = "name"); '
    '[sandbox] user = "root" keeps commands running as root'
)


def _registry(root: Path, mode: str = "required", **settings: Any) -> Any:
    return command_registry(root, sandbox=SandboxSettings(mode=mode, **settings))  # type: ignore[arg-type]


def _ids(registry: Any) -> str:
    return str(ok(registry, command="id -u; id -g; id -G").value["output"])


@pytest.fixture
def owned(tmp_path: Path) -> Path:
    """A workspace root owns (as ``tmp_path`` is on a root host)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


@needs_root_sandbox
def test_a_root_host_runs_commands_as_the_workspace_owner(owned: Path) -> None:
    (owned / "hosts-file").write_text("root's\n")  # root's, in a workspace root gave away
    give_away(owned)
    os.chown(owned / "hosts-file", 0, 0)
    registry = _registry(owned)
    assert _ids(registry) == f"{UNPRIVILEGED}\n{UNPRIVILEGED}\n{UNPRIVILEGED}\n"
    changed = ok(registry, command="echo pwned >> hosts-file")
    assert changed.value["exit_code"] != 0
    assert (owned / "hosts-file").read_text() == "root's\n"
    assert ok(registry, command="echo mine > new").value["exit_code"] == 0
    assert (owned / "new").stat().st_uid == UNPRIVILEGED


@needs_root_sandbox
@pytest.mark.parametrize("mode", ["required", "auto"])
def test_a_workspace_root_owns_is_refused_before_anything_runs(owned: Path, mode: str) -> None:
    refused = run(_registry(owned, mode), command="touch ran")
    assert (refused.code, refused.text) == ("DENIED", _REFUSAL)
    assert not (owned / "ran").exists()


@needs_root_sandbox
def test_the_user_setting_names_who_commands_run_as(owned: Path) -> None:
    reachable(owned)  # the user passes through the folders above it
    assert _ids(_registry(owned, user=UNPRIVILEGED)).startswith(f"{UNPRIVILEGED}\n")
    nobody = pwd.getpwuid(UNPRIVILEGED)
    named = f"{nobody.pw_uid}\n{nobody.pw_gid}\n{nobody.pw_gid}\n"
    assert _ids(_registry(owned, user=nobody.pw_name)) == named
    give_away(owned)  # "root" wins over the workspace's owner too
    for opt_in in ("root", 0):
        assert _ids(_registry(owned, user=opt_in)).startswith("0\n0\n")


@needs_root_sandbox
def test_an_unknown_user_is_refused(owned: Path) -> None:
    refused = run(_registry(owned, user="no-such-user-here"), command="touch ran")
    assert (refused.code, refused.text) == (
        "DENIED",
        "Error: [sandbox] user = 'no-such-user-here': there is no such user on this host",
    )
    assert not (owned / "ran").exists()


@needs_root_sandbox
def test_a_host_that_is_not_root_cannot_switch_users(
    owned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen as user id 1000 (a real one cannot start this test's Python, which lives in
    root's home): the setting may name only that user, and nothing is refused for the
    workspace's owner."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    for user in ("root", 0, UNPRIVILEGED):
        refused = run(_registry(owned, user=user), command="touch ran")
        assert (refused.code, refused.text) == (
            "DENIED",
            f"Error: [sandbox] user = {user!r} names another user, but this host runs as "
            "user id 1000, which cannot switch users: remove the setting, or run the host "
            "as root",
        )
    assert not (owned / "ran").exists()
    assert ok(_registry(owned), command="true").value["sandboxed"] is True
    assert ok(_registry(owned, user=1000), command="true").value["sandboxed"] is True


def test_the_rules_file_names_the_user() -> None:
    rules = PermissionRules.from_toml_text('[sandbox]\nuser = "builder"\n', source="r.toml")
    assert rules.sandbox is not None
    assert rules.sandbox.user == "builder"
    assert PermissionRules.from_toml_text("[sandbox]\nuser = 1000\n").sandbox == SandboxSettings(
        user=1000
    )
    for value, problem in (
        ("true", "sandbox user must be a user name or a numeric user id, got True"),
        ('""', "sandbox user must be a user name, got ''"),
        ("-1", "sandbox user must be a user id of 0 or more, got -1"),
    ):
        with pytest.raises(RulesError) as raised:
            PermissionRules.from_toml_text(f"[sandbox]\nuser = {value}\n", source="r.toml")
        assert str(raised.value).startswith("r.toml:2")
        assert problem in str(raised.value)
