"""``.gitignore`` and ``.ignore`` rules for the search tools' walk, as git applies them.

Every directory may hold a ``.gitignore`` and an ``.ignore`` (read in that order, so a
line of ``.ignore`` wins over one of ``.gitignore``); their patterns apply to that
directory's subtree, relative to it, and a deeper file's verdict wins over a shallower
one's. An ignored directory is not entered, so nothing under it comes back (git's rule:
a negated pattern cannot re-include a file whose parent directory is excluded). The
rules of directories above the one searched apply too, up to the workspace root, unless
they ignore the searched directory itself: a directory named explicitly is searched.

Matching is :mod:`pathspec`'s ``GitIgnoreSpec`` on its ``re2`` backend: the workspace's
ignore files can be written by the model, and pathspec's default backend compiles their
patterns to Python regexes that backtrack (``*a*a*a*a*a*a*b`` took seconds per name).
An ignore file that cannot be read (a symlink, not a regular file, over
:data:`MAX_IGNORE_FILE_BYTES`) is not applied; a line pathspec refuses is skipped, as
git skips it. ``.git/info/exclude`` and the user's global excludes are not read.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any

from dsh_tools._json import is_unicode, unicode_text

from ..workspace import Opened, Workspace

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec

__all__ = ["IGNORE_FILES", "MAX_IGNORE_FILE_BYTES", "IgnoreFilter", "ignore_filter"]

IGNORE_FILES = (".gitignore", ".ignore")
"""The ignore files read in every directory, in this order (later lines win)."""

MAX_IGNORE_FILE_BYTES = 1024 * 1024
"""Ignore files larger than this are not applied."""

_LINES_PER_SPEC = 1000
"""Ignore lines compiled into one RE2 set; RE2 refuses much larger sets."""

_NOFOLLOW_CLOEXEC = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_READ_FLAGS = os.O_RDONLY | _NOFOLLOW_CLOEXEC | getattr(os, "O_NONBLOCK", 0)
_DIRECTORY_FLAGS = os.O_RDONLY | _NOFOLLOW_CLOEXEC | getattr(os, "O_DIRECTORY", 0)


class _Rules:
    """The compiled lines of one directory's ignore files, in order.

    Most paths match no line; one RE2 set of every line's regex answers that in about a
    microsecond, against several for pathspec's full verdict, which is asked only when
    some line matches. A second set, the same regexes in multi-line mode, answers it for
    all of a directory's files at once (:meth:`match_none`).
    """

    __slots__ = ("_any", "_any_line", "_specs")

    def __init__(self, specs: list[GitIgnoreSpec]) -> None:
        import re2  # type: ignore[import-untyped]
        from pathspec import RegexPattern

        self._specs = specs
        self._any: Any = None
        self._any_line: Any = None
        regexes = [
            pattern.regex.pattern
            for spec in specs
            for pattern in spec.patterns
            if isinstance(pattern, RegexPattern) and pattern.regex is not None
        ]
        with contextlib.suppress(re2.error):
            any_line = re2.Set.SearchSet(re2.Options())
            for regex in regexes:
                any_line.Add(regex)
            any_line.Compile()
            self._any = any_line
        with contextlib.suppress(re2.error):
            in_lines = re2.Set.SearchSet(re2.Options())
            for regex in regexes:
                in_lines.Add(f"(?m){regex}")
            in_lines.Compile()
            self._any_line = in_lines

    def match_none(self, paths: list[str]) -> bool:
        """True when no line matches any of ``paths`` (no newline in them); false when
        some might. ``^`` and ``$`` match at each line's ends in the joined text, so a
        path a line matches alone is matched there too; the reverse may not hold (a
        class such as ``[^/]`` spans newlines), which only costs the per-path check."""
        return self._any_line is not None and not self._any_line.Match("\n".join(paths))

    def verdict(self, path: str) -> bool | None:
        """True: ignored; False: re-included by a negated line; None: no line matches."""
        if self._any is not None and not self._any.Match(path):
            return None
        for spec in reversed(self._specs):  # later lines win
            included = spec.check_file(path, ()).include  # (): our paths use "/" already
            if included is not None:
                return included
        return None


def _compile(lines: list[str]) -> list[GitIgnoreSpec]:
    """GitIgnoreSpecs for ``lines``, in chunks RE2 accepts; lines refused alone are dropped."""
    from pathspec import GitIgnoreSpec

    specs: list[GitIgnoreSpec] = []
    for start in range(0, len(lines), _LINES_PER_SPEC):
        chunk = lines[start : start + _LINES_PER_SPEC]
        try:
            specs.append(GitIgnoreSpec.from_lines(chunk, backend="re2"))
        except Exception:  # pathspec's pattern errors, RE2's "failed to compile Set"
            specs.extend(_compile_each(chunk))
    return specs


def _compile_each(lines: list[str]) -> list[GitIgnoreSpec]:
    from pathspec import GitIgnoreSpec

    specs: list[GitIgnoreSpec] = []
    for line in lines:
        try:
            specs.append(GitIgnoreSpec.from_lines([line], backend="re2"))
        except Exception:  # a line git would not understand either: skip it
            continue
    return specs


def _read_rules(dir_fd: int, files: AbstractSet[str] | None = None) -> _Rules | None:
    """The rules of the ignore files in the directory ``dir_fd``; ``None`` without any.

    ``files``, when known, are the regular files there: absent ignore files are not
    even tried (an ``open`` that fails costs as much as one that succeeds).
    """
    lines: list[str] = []
    for name in IGNORE_FILES:
        if files is not None and name not in files:
            continue
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
        except OSError:
            continue
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_IGNORE_FILE_BYTES:
                continue
            data = os.read(fd, MAX_IGNORE_FILE_BYTES + 1)
        except OSError:
            continue
        finally:
            os.close(fd)
        if len(data) <= MAX_IGNORE_FILE_BYTES:
            lines.extend(data.decode("utf-8", errors="replace").splitlines())
    if not any(line.strip() and not line.startswith("#") for line in lines):
        return None
    return _Rules(_compile(lines))


class IgnoreFilter:
    """A :class:`~dsh_tools_plugins.workspace.WalkFilter` applying ignore files.

    ``chain`` holds, shallowest first, each applicable directory's rules with this
    directory's path relative to that one (``""`` for this directory itself).
    """

    __slots__ = ("_chain", "_clear")

    def __init__(
        self, chain: tuple[tuple[_Rules, str], ...], clear: AbstractSet[str] = frozenset()
    ) -> None:
        self._chain = chain
        self._clear = clear

    def admits(self, name: str, is_dir: bool) -> bool:
        if not self._chain or (not is_dir and name in self._clear):
            return True
        if not is_unicode(name):
            name = unicode_text(name)  # RE2 matches UTF-8 text
        suffix = "/" if is_dir else ""
        for rules, prefix in reversed(self._chain):  # the deepest verdict wins
            verdict = rules.verdict(prefix + name + suffix)
            if verdict is not None:
                return not verdict
        return True

    def enter(self, name: str, dir_fd: int, files: AbstractSet[str]) -> IgnoreFilter:
        return self.below(name).with_rules_of(dir_fd, files).clearing(files)

    def clearing(self, files: AbstractSet[str]) -> IgnoreFilter:
        """This filter, told that no rule matches any of ``files`` when one look per
        ignore file's rules shows it, so :meth:`admits` then skips their per-name check:
        a directory's files are usually all admitted."""
        names = [name if is_unicode(name) else unicode_text(name) for name in files]
        if not self._chain or any("\n" in name for name in names):
            return self
        for rules, prefix in self._chain:
            if not rules.match_none([prefix + name for name in names]):
                return self
        return IgnoreFilter(self._chain, files)

    def below(self, name: str) -> IgnoreFilter:
        """The rules above the subdirectory ``name``, seen from it (none of its own)."""
        if not is_unicode(name):
            name = unicode_text(name)
        return IgnoreFilter(tuple((rules, f"{prefix}{name}/") for rules, prefix in self._chain))

    def with_rules_of(self, dir_fd: int, files: AbstractSet[str] | None = None) -> IgnoreFilter:
        """This filter plus the rules of the ignore files in the directory ``dir_fd``."""
        own = _read_rules(dir_fd, files)
        return self if own is None else IgnoreFilter((*self._chain, (own, "")))


def ignore_filter(workspace: Workspace, start: Opened) -> IgnoreFilter:
    """The filter for a walk of the directory ``start``.

    It holds the rules of ``start`` and of every directory above it up to the workspace
    root, read through ``O_NOFOLLOW`` steps from the root (a step that fails ends the
    climb: what was read so far applies). When those rules ignore ``start`` or a
    directory on the way to it, only ``start``'s own rules apply: a directory named
    explicitly is searched.
    """
    parts = workspace.parts(start.path)
    here = IgnoreFilter(())
    try:
        fd = os.open(workspace.root, _DIRECTORY_FLAGS)
    except OSError:
        return here.with_rules_of(start.fd)
    try:
        here = here.with_rules_of(fd)
        for name in parts:
            if not here.admits(name, is_dir=True):
                return IgnoreFilter(()).with_rules_of(start.fd)
            parent, fd = fd, -1
            try:
                fd = os.open(name, _DIRECTORY_FLAGS, dir_fd=parent)
            finally:
                os.close(parent)
            here = here.below(name).with_rules_of(fd)
    except OSError:
        pass  # the tree changed while we climbed: the rules read so far apply
    finally:
        if fd >= 0:
            os.close(fd)
    return here
