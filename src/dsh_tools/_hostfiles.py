"""Files the host reads or writes for itself, opened where a tool cannot reach them.

A host file is one the host keeps for its own use: the permission rules, the audit log,
the approval and ticket stores, configuration. A sandboxed command and the first-party
file tools can write the workspace (and a sandbox's ``read_write_paths``), so a host file
there could be rewritten or swapped for a link by the very calls it governs. The rule is
*refusal*: a host file inside a tree they can write is refused, with a message saying
where to keep it. (Mounting it read-only would protect it only while a sandbox runs, not
against the file tools or a command run without the sandbox.)

Every host file goes through this module:

* :func:`open_host_file` walks the path from ``/`` one component at a time, each opened
  relative to its parent's descriptor with ``O_NOFOLLOW``, so no component may be a
  symbolic link; checks that no directory on the way is the root of a writable tree
  (compared by device and inode, so another spelling of the same folder is caught too);
  and opens the last component, refusing anything but a regular file. The host then
  reads or writes that descriptor, never the path again.
* :func:`check_host_file` does the same walk for a file another library opens by its
  path (SQLite): once it passes, nothing a tool can write lies on that path.
* :func:`open_unlinked` is the walk alone (an ``O_PATH`` descriptor), for paths that are
  not host files but must not pass through a link either (the sandbox's extra mounts).

:func:`writable_trees` says which trees a tool can write, as far as this process knows:
``$DSH_TOOLS_WORKSPACE`` (what the ``workspace`` entry point and the CLI use) and every
workspace root handed to tools so far, or else the current directory (the entry points'
default workspace). Every refusal is a :class:`HostFileError` naming the file.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable

from ._plugins.settings import WORKSPACE_ENV, plugin_settings
from .errors import DshToolsError, ErrorCode

__all__ = [
    "WORKSPACE_ENV",
    "HostFileError",
    "add_writable_tree",
    "check_host_file",
    "open_host_file",
    "open_unlinked",
    "writable_trees",
]

KEEP_OUTSIDE = "keep it outside the workspace, for example under ~/.config/dsh-tools/"
"""The advice a refusal gives unless its caller has a better one."""

_PATH = getattr(os, "O_PATH", os.O_RDONLY)
"""Open for its place only (Linux); elsewhere a directory is opened for reading."""
_DIRECTORY_STEP = _PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class HostFileError(DshToolsError, ValueError):
    """A host file cannot be used: it is inside a tree that tools can write, it is or
    passes through a symbolic link, it is not a regular file, or it cannot be opened.

    ``what`` names the file's role ("the rules file"), ``path`` is the path as given,
    ``problem`` says what is wrong, and ``link`` is the component that is a symbolic
    link (or ``None``).
    """

    default_code = ErrorCode.POLICY_ERROR.value

    def __init__(self, what: str, path: str, problem: str, *, link: str | None = None) -> None:
        super().__init__(f"{what} {path}: {problem}")
        self.what = what
        self.path = path
        self.problem = problem
        self.link = link


class _Missing(HostFileError):
    """A directory on the way does not exist (and was not to be made)."""


_handed: set[str] = set()
"""The workspace roots this process has given tools (see :func:`add_writable_tree`)."""


def add_writable_tree(path: str | os.PathLike[str]) -> None:
    """Record that tools of this process write the tree at ``path`` (every
    :class:`~dsh_tools_plugins.workspace.Workspace` root does, and every sandbox's
    ``read_write_paths``), so that no host file is accepted inside it from now on."""
    _handed.add(os.fspath(path))


def writable_trees(*extra: str | os.PathLike[str]) -> tuple[str, ...]:
    """The trees a tool or a sandboxed command may write: ``$DSH_TOOLS_WORKSPACE`` (the
    workspace of the entry points and the CLI) and every workspace root this process has
    given tools; the current directory when there is neither (the entry points'
    default workspace); then ``extra``."""
    named = plugin_settings().workspace  # while plugins load, the one they were given
    trees = ([named] if named else []) + sorted(_handed)
    return (*(trees or [os.getcwd()]), *(os.fspath(tree) for tree in extra))


def _identities(trees: Iterable[str | os.PathLike[str]]) -> dict[tuple[int, int], str]:
    found: dict[tuple[int, int], str] = {}
    for tree in trees:
        try:
            info = os.stat(tree)
        except OSError:
            continue  # a tree that does not exist holds nothing
        found.setdefault((info.st_dev, info.st_ino), os.fspath(tree))
    return found


class _Walk:
    """One path's walk: its role, its parts, the trees it must stay out of."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        what: str,
        trees: Iterable[str | os.PathLike[str]] | None,
        instead: str,
    ) -> None:
        self.given = os.fspath(path)
        self.what = what
        self.absolute = os.path.abspath(self.given)
        self.parts = [part for part in self.absolute.split("/") if part]
        self.trees = _identities(writable_trees() if trees is None else trees)
        self.instead = instead

    def fail(self, problem: str, *, link: str | None = None) -> HostFileError:
        return HostFileError(self.what, self.given, problem, link=link)

    def _check_tree(self, fd: int, walked: str) -> None:
        info = os.fstat(fd)
        tree = self.trees.get((info.st_dev, info.st_ino))
        if tree is not None:
            seen = "" if os.path.abspath(tree) == walked else f" (reached as {walked})"
            raise self.fail(
                f"it is inside {tree}{seen}, which sandboxed commands and the file tools "
                f"can write; {self.instead}"
            )

    def parent(self, make_mode: int | None) -> tuple[int, str]:
        """A descriptor of the last part's directory and the last part's name; missing
        directories are made with ``make_mode`` (or refused when it is ``None``)."""
        if not self.parts:
            raise self.fail("is not a file")
        fd = os.open("/", _DIRECTORY_STEP)
        try:
            self._check_tree(fd, "/")
            walked = ""
            for name in self.parts[:-1]:
                walked += "/" + name
                child = self._step(fd, name, walked, make_mode)
                os.close(fd)
                fd = child
                self._check_tree(fd, walked)
        except BaseException:
            os.close(fd)
            raise
        return fd, self.parts[-1]

    def _step(self, fd: int, name: str, walked: str, make_mode: int | None) -> int:
        """Open the directory ``name`` below ``fd`` without following it."""
        try:
            try:
                return os.open(name, _DIRECTORY_STEP, dir_fd=fd)
            except FileNotFoundError:
                if make_mode is None:
                    raise
            with contextlib.suppress(FileExistsError):  # made meanwhile: checked below
                os.mkdir(name, make_mode, dir_fd=fd)
            return os.open(name, _DIRECTORY_STEP, dir_fd=fd)
        except OSError as error:
            refused = self.refusal(error, walked, fd, name)
            missing = isinstance(error, (FileNotFoundError, NotADirectoryError))
        if missing and refused.link is None:
            raise _Missing(self.what, self.given, refused.problem)
        raise refused

    def refusal(self, error: OSError, walked: str, fd: int, name: str) -> HostFileError:
        """The error for a component that would not open: a link is named as one."""
        try:
            is_link = stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
        except OSError:
            is_link = False
        if is_link:
            where = "is" if walked == self.absolute else f"passes through {walked}, which is"
            return self.fail(
                f"{where} a symbolic link; refusing to follow it (give the real path)",
                link=walked,
            )
        place = "it" if walked == self.absolute else walked
        return self.fail(f"cannot open {place}: {error.strerror or error}")


def open_host_file(
    path: str | os.PathLike[str],
    flags: int = os.O_RDONLY,
    *,
    what: str,
    trees: Iterable[str | os.PathLike[str]] | None = None,
    mode: int = 0o600,
    make_parents: int | None = None,
    instead: str = KEEP_OUTSIDE,
) -> int:
    """A descriptor of the host file ``path`` opened with ``flags`` (``O_CREAT`` creates
    it with ``mode``), or :class:`HostFileError`.

    No component may be a symbolic link, no directory on the way may be one of ``trees``
    (default :func:`writable_trees`), and the file must be a regular file.
    ``make_parents`` is the mode for missing directories to create (``None``: they must
    exist). ``what`` names the file in messages ("the audit log"); ``instead`` says
    where to keep it when it is inside a tree.
    """
    walk = _Walk(path, what, trees, instead)
    parent, name = walk.parent(make_parents)
    try:
        opened = flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # a FIFO must not block
        try:
            fd = os.open(name, opened, mode, dir_fd=parent)
        except OSError as error:
            raise walk.refusal(error, walk.absolute, parent, name) from None
    finally:
        os.close(parent)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise walk.fail("is not a regular file")
        if not flags & os.O_NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_host_file(
    path: str | os.PathLike[str],
    *,
    what: str,
    trees: Iterable[str | os.PathLike[str]] | None = None,
    make_parents: int | None = None,
    instead: str = KEEP_OUTSIDE,
) -> None:
    """Check the host file ``path`` as :func:`open_host_file` would, for a library that
    opens it by its path itself; a file that does not exist yet passes (its directory
    is checked). Raise :class:`HostFileError` otherwise."""
    walk = _Walk(path, what, trees, instead)
    parent, name = walk.parent(make_parents)
    try:
        try:
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return
        except OSError as error:
            raise walk.refusal(error, walk.absolute, parent, name) from None
        if stat.S_ISLNK(info.st_mode):
            raise walk.fail(
                "is a symbolic link; refusing to follow it (give the real path)",
                link=walk.absolute,
            )
        if not stat.S_ISREG(info.st_mode):
            raise walk.fail("is not a regular file")
    finally:
        os.close(parent)


def open_unlinked(path: str | os.PathLike[str], *, what: str) -> int | None:
    """An ``O_PATH`` descriptor of ``path`` (a file or a directory), walked from ``/``
    without following a link at any component; ``None`` when it does not exist. A
    component that is a link raises :class:`HostFileError` with ``link`` set."""
    walk = _Walk(path, what, (), KEEP_OUTSIDE)
    try:
        parent, name = walk.parent(None)
    except _Missing:
        return None
    try:
        fd = os.open(name, _PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise walk.refusal(error, walk.absolute, parent, name) from None
    finally:
        os.close(parent)
    if stat.S_ISLNK(os.fstat(fd).st_mode):
        os.close(fd)
        raise walk.fail(
            "is a symbolic link; refusing to follow it (give the real path)", link=walk.absolute
        )
    return fd
