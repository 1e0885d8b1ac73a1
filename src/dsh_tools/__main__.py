"""``python -m dsh_tools``: the ``dsh-tools`` command, where that is safe.

``python -m`` puts the current directory first on the import path (unless ``-P`` or
``PYTHONSAFEPATH`` is given). Run from the workspace, every module this program imports
later (``dsh_tools_plugins``, a plugin, a library it loads lazily) could come from a file
a sandboxed command planted there. So it refuses to run when the current directory is
first on the import path and is inside the workspace (``--workspace``,
``$DSH_TOOLS_WORKSPACE``, or by default the current directory itself) or holds a
``dsh_tools`` or ``dsh_tools_plugins`` entry. A ``dsh_tools/`` planted there would have
been imported in place of this very package, before any check could run: use the
``dsh-tools`` console script, whose import path does not start with the current
directory.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from ._hostfiles import WORKSPACE_ENV
from .cli._exits import EXIT_USAGE

_OURS = ("dsh_tools", "dsh_tools_plugins")


def _workspace(argv: Sequence[str], environ: Mapping[str, str], here: str) -> str:
    """The workspace the command would use, read the way its options are."""
    for index, argument in enumerate(argv):
        if argument == "--workspace" and index + 1 < len(argv):
            return argv[index + 1]
        if argument.startswith("--workspace="):
            return argument.partition("=")[2]
    return environ.get(WORKSPACE_ENV, "").strip() or here


def unsafe_import_path(
    argv: Sequence[str], path: Sequence[str], environ: Mapping[str, str]
) -> str | None:
    """Why imports could come from a tree a command can write, or ``None``."""
    here = os.getcwd()
    if not path or os.path.realpath(path[0] or ".") != os.path.realpath(here):
        return None  # -P, PYTHONSAFEPATH, or not started with -m
    planted = [name for name in _OURS if os.path.lexists(os.path.join(here, name))]
    if planted:
        return f"the current directory {here} holds {planted[0]!r}"
    workspace = os.path.realpath(_workspace(argv, environ, here))
    real = os.path.realpath(here)
    if os.path.commonpath((real, workspace)) == workspace:
        return f"the current directory {here} is inside the workspace {workspace}"
    return None


def main() -> None:
    reason = unsafe_import_path(sys.argv[1:], sys.path, os.environ)
    if reason is not None:
        sys.stderr.write(
            f"dsh-tools: error: refusing to run as python -m dsh_tools: {reason}, and "
            "python -m imports from there first, where a command could plant code. Run "
            "the dsh-tools command instead (or python -P -m dsh_tools)\n"
        )
        sys.exit(EXIT_USAGE)
    from .cli import console_main

    console_main()


if __name__ == "__main__":
    main()
