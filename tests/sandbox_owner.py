"""Workspaces for sandboxed commands on a root host (as these tests run here and in CI):
such a host runs the commands as the workspace's owner and refuses a workspace that
root owns, so the tests hand theirs to an unprivileged user."""

from __future__ import annotations

import os
import stat
from pathlib import Path

UNPRIVILEGED = 65534
"""The user id test workspaces get on a root host (``nobody`` on most systems)."""


def give_away(*trees: Path) -> None:
    """On a root host, hand ``trees`` and everything in them to :data:`UNPRIVILEGED`, and
    let that user pass through the folders above them: a root host runs sandboxed
    commands as the workspace's owner (it refuses a workspace that root owns), and
    bubblewrap, started as that user, must reach it. Elsewhere nothing changes."""
    if os.geteuid() != 0:
        return
    for tree in trees:
        for path in (tree, *tree.rglob("*")):
            os.chown(path, UNPRIVILEGED, UNPRIVILEGED, follow_symlinks=False)
        reachable(tree)


def reachable(path: Path) -> None:
    """Let every user pass through the folders above ``path`` (not list them)."""
    for parent in path.parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
