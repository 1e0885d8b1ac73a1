"""Paths in ACP updates: absolute where clients open them, relative to the cwd in titles.

:mod:`dsh_tools.bridges.acp` is the public import path of the bridge.
"""

from __future__ import annotations

import re

_WINDOWS_ABSOLUTE = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\)")


def _is_windows(path: str) -> bool:
    return _WINDOWS_ABSOLUTE.match(path) is not None


def _is_absolute(path: str) -> bool:
    return path.startswith("/") or _is_windows(path)


def absolute_path(path: str, cwd: str | None) -> str:
    """``path`` resolved against ``cwd`` when relative; never normalized or rewritten."""
    if cwd is None or _is_absolute(path) or not _is_absolute(cwd):
        return path
    separator = "\\" if _is_windows(cwd) else "/"
    if path in ("", "."):
        return cwd
    return cwd.rstrip("/\\") + separator + path


def relative_title(title: str | None, cwd: str | None) -> str | None:
    """``title`` with absolute paths inside ``cwd`` shown relative to it."""
    if title is None or cwd is None or not _is_absolute(cwd):
        return title
    root = cwd.rstrip("/\\")
    if not root:  # cwd "/" : every path is inside, but "a/b" reads worse than "/a/b"
        return title
    separators = r"[\\/]" if _is_windows(cwd) else "/"
    pattern = re.compile(
        r"(?:^|(?<=[\s\"'`(\[<]))" + re.escape(root) + separators + r"(?=[^\s/\\])"
    )
    return pattern.sub("", title)
