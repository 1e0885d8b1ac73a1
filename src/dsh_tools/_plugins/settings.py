"""What a host configures the entry points with: the workspace, the rules file, the
sandbox. :func:`~dsh_tools.load_plugins` takes them as arguments and hands them to
the entry points it calls (which take no arguments) through :func:`plugin_settings`, so
two registries of one process may load plugins for two workspaces; what it was not given
comes from the environment, which is how the ``dsh-tools`` command sets them.

``dsh_tools.plugin_settings`` and ``dsh_tools.PluginSettings`` are the public names.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator
from typing import Final

import attrs

from ..errors import PluginConfigError

__all__ = [
    "NETWORK_ENV",
    "RULES_ENV",
    "SANDBOX_ENV",
    "WORKSPACE_ENV",
    "PluginSettings",
    "given_settings",
    "plugin_settings",
]

WORKSPACE_ENV: Final = "DSH_TOOLS_WORKSPACE"
"""Environment variable naming the workspace root of the ``workspace`` entry point."""
RULES_ENV: Final = "DSH_TOOLS_RULES"
"""The environment variable naming the permission rules file (TOML)."""
SANDBOX_ENV: Final = "DSH_TOOLS_SANDBOX"
"""The environment variable naming the sandbox mode (``auto``, ``required``, ``off``)."""
NETWORK_ENV: Final = "DSH_TOOLS_NETWORK"
"""The environment variable saying whether sandboxed commands reach the network."""
_SANDBOX_MODES: Final = ("auto", "required", "off")


@attrs.frozen
class PluginSettings:
    """What the first-party entry points are configured with; ``None`` leaves a setting
    to the entry point's default (the current directory, the built-in rules, ``auto``,
    the network off).

    :param workspace: the root the workspace tools are confined to (an absolute path).
    :param rules: the permission rules file (TOML) the ``default_permissions``,
        ``limits``, ``budgets`` and ``cache`` entry points read (an absolute path).
    :param sandbox: the sandbox mode of ``run_command``, over the rules file's.
    :param network: ``"on"`` or ``"off"``: whether sandboxed commands reach the
        network, over the rules file's.
    """

    workspace: str | None = None
    rules: str | None = None
    sandbox: str | None = None
    network: str | None = None


_GIVEN: contextvars.ContextVar[PluginSettings | None] = contextvars.ContextVar(
    "dsh_tools_plugin_settings", default=None
)
"""What the running :func:`~dsh_tools.load_plugins` was given."""
_NOTHING: Final = PluginSettings()


def plugin_settings() -> PluginSettings:
    """The settings an entry point is configured with: each one the running
    :func:`~dsh_tools.load_plugins` call was given, else its environment
    variable (:data:`WORKSPACE_ENV`, :data:`RULES_ENV`, :data:`SANDBOX_ENV`,
    :data:`NETWORK_ENV`; empty counts as unset), else ``None``."""
    given = _GIVEN.get() or _NOTHING

    def setting(value: str | None, variable: str) -> str | None:
        return value if value is not None else os.environ.get(variable, "").strip() or None

    return PluginSettings(
        setting(given.workspace, WORKSPACE_ENV),
        setting(given.rules, RULES_ENV),
        setting(given.sandbox, SANDBOX_ENV),
        setting(given.network, NETWORK_ENV),
    )


@contextlib.contextmanager
def given_settings(
    workspace: str | os.PathLike[str] | None,
    rules: str | os.PathLike[str] | None,
    sandbox: str | None,
    network: bool | None,
) -> Iterator[None]:
    """While entry points load, :func:`plugin_settings` answers with these arguments of
    :func:`~dsh_tools.load_plugins`, checked; raises
    :class:`~dsh_tools.errors.PluginConfigError` naming a bad one."""
    if workspace is not None and not os.path.isdir(workspace):
        raise PluginConfigError(
            f"load_plugins(workspace={os.fspath(workspace)!r}): not a directory"
        )
    if rules is not None and not os.path.isfile(rules):
        raise PluginConfigError(f"load_plugins(rules={os.fspath(rules)!r}): not a file")
    if sandbox is not None and sandbox not in _SANDBOX_MODES:
        raise PluginConfigError(
            f"load_plugins(sandbox={sandbox!r}): expected one of {', '.join(_SANDBOX_MODES)}"
        )
    if network is not None and type(network) is not bool:
        raise PluginConfigError(f"load_plugins(network={network!r}): expected True or False")
    token = _GIVEN.set(
        PluginSettings(
            None if workspace is None else os.path.abspath(workspace),
            None if rules is None else os.path.abspath(rules),
            sandbox,
            None if network is None else ("on" if network else "off"),
        )
    )
    try:
        yield
    finally:
        _GIVEN.reset(token)
