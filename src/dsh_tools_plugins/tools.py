"""Entry-point constructor: all seven workspace tools bound to one workspace root.

Registered as ``[project.entry-points."dsh_tools.tools"] workspace =
"dsh_tools_plugins.tools:workspace_tools"``; the plugin loader calls it with no argument,
so the root then comes from :func:`~dsh_tools.plugin_settings`: the
``workspace`` given to :func:`~dsh_tools.load_plugins`, else the
``DSH_TOOLS_WORKSPACE`` environment variable, else the current directory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

from dsh_tools import _hostfiles as hostfiles
from dsh_tools._models import ToolDefinition
from dsh_tools._plugins.settings import plugin_settings

from .command import run_command_tool
from .files import edit_file_tool, list_dir_tool, read_file_tool, write_file_tool
from .permissions import configured_sandbox
from .sandbox import SandboxMode, SandboxSettings
from .search import glob_tool, grep_tool
from .workspace import Workspace

__all__ = ["WORKSPACE_ENV", "workspace_tools"]

WORKSPACE_ENV: Final = hostfiles.WORKSPACE_ENV
"""Environment variable naming the workspace root when none is given."""


def workspace_tools(
    root: str | os.PathLike[str] | None = None,
    *,
    sandbox: SandboxSettings | SandboxMode | None = None,
    env: Mapping[str, str] | None = None,
) -> list[ToolDefinition[Any]]:
    """``read_file``, ``write_file``, ``edit_file``, ``list_dir``, ``glob``, ``grep`` and
    ``run_command``, all confined to one :class:`~dsh_tools_plugins.workspace.Workspace`.

    ``root=None`` takes the workspace :func:`~dsh_tools.load_plugins` was given,
    else :data:`WORKSPACE_ENV`, else the current directory.
    ``sandbox`` and ``env`` go to :func:`~dsh_tools_plugins.command.run_command_tool`;
    ``sandbox=None`` (what the entry point gets) takes what the host configured,
    :func:`~dsh_tools_plugins.permissions.configured_sandbox`: the rules file's
    ``[sandbox]`` table and the command's ``--sandbox``/``--network``, else ``auto``.
    Raises :class:`ValueError` when the root is not an existing directory or a sandbox
    setting is invalid.
    """
    if root is None:
        root = plugin_settings().workspace or os.getcwd()
    workspace = Workspace(root)
    if sandbox is None:
        sandbox = configured_sandbox()
    return [
        read_file_tool(workspace),
        write_file_tool(workspace),
        edit_file_tool(workspace),
        list_dir_tool(workspace),
        glob_tool(workspace),
        grep_tool(workspace),
        run_command_tool(workspace, sandbox=sandbox, env=env),
    ]
