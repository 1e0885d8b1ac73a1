"""Confinement of file tools to one workspace root. Nothing else.

Every path a tool receives goes through :class:`Workspace`. A path is refused with
``ToolError(..., code=ErrorCode.DENIED)`` when it

* escapes the root lexically (``../x``, ``a/../../x``) or is absolute outside it;
* crosses a symbolic link at any component, the final one included (links are never
  followed, even when they point back inside the root: a link can be swapped later);
* is opened for writing while the file has more than one hard link (another name of the
  same file may lie outside the root, and nothing can prove it does not);
* is used after the root itself was moved or replaced (say, by a symlink to elsewhere).

Checking a path and then opening it by name is racy: a directory can be swapped for a
symlink in between. So opening never re-walks the path by name. It walks it component by
component from a descriptor of the root, with ``openat(..., O_NOFOLLOW)`` at every step,
and then verifies the opened descriptor: its real path (``/proc/self/fd`` where the
platform has it) must lie inside the root, the path must still be symlink-free, and the
descriptor must be the very file (``st_dev``/``st_ino``) the path names now. A swap at
any moment either makes a step fail (``ELOOP``/``ENOTDIR``) or fails the verification.
The root's descriptor is proven to be the directory the workspace started with (its
``st_dev``/``st_ino``) before any step, so nothing is created when the root was swapped.

Every walk takes one system call per component, each on a single name relative to a
descriptor, so checking and opening a path cost time linear in its length.

Names are shown with :func:`~dsh_tools._safetext.safe_text`: bytes that are not UTF-8
(which Python decodes to lone surrogates) appear as U+FFFD, and control characters (a
newline, an escape sequence) and bidi controls as visible escapes, so a message or
listing is always valid Unicode and a name cannot forge a line of it.

:meth:`Workspace.walk_files` starts a directory walk from a directory opened here; the
walk itself is :mod:`dsh_tools_plugins._walk`'s.

POSIX only (Linux, macOS, BSD): it relies on ``dir_fd`` support in :mod:`os`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

import attrs

from dsh_tools._hostfiles import add_writable_tree
from dsh_tools._paths import PathArgument, ToolPaths
from dsh_tools._safetext import safe_text
from dsh_tools.errors import ErrorCode, ToolError

from . import _walk
from ._walk import WALK_OPEN_DIRECTORIES, WalkFilter, WorkspaceFile

__all__ = ["WALK_OPEN_DIRECTORIES", "Opened", "WalkFilter", "Workspace", "WorkspaceFile"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_PATH = getattr(os, "O_PATH", os.O_RDONLY)
_DESCEND = _PATH | _DIRECTORY | _CLOEXEC
"""Flags for a directory a walk only passes through (``O_PATH`` needs no read permission)."""
_PROC_FD = "/proc/self/fd"
_DIRECTORY_ENDINGS = ("/..", "/.", "/")


def _denied(message: str) -> ToolError:
    return ToolError(message, code=ErrorCode.DENIED)


def _identity(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


@attrs.frozen
class Opened:
    """An open descriptor inside the workspace; close it (or use ``with``)."""

    fd: int
    path: Path
    display: str
    stat: os.stat_result
    created: bool = False

    def close(self) -> None:
        """Close the descriptor (idempotent)."""
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def __enter__(self) -> Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Workspace:
    """A directory that tools may read and write in; everything outside is refused.

    ``root`` must be an existing directory; it is resolved once (symlinks in the root
    path itself are the host's choice and are allowed), and its identity (device and
    inode) is kept: once the path no longer names that directory, every call is refused.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        real = Path(os.path.realpath(os.fspath(root)))
        if not real.is_dir():
            raise ValueError(f"workspace root {os.fspath(root)!r} is not a directory")
        self.root: Path = real
        self._root_parts = PurePosixPath(real).parts
        self._identity = _identity(os.stat(real))
        add_writable_tree(real)  # no host file of this process may live here

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"

    # ------------------------------------------------------------------ checking

    def parts(self, path: str | os.PathLike[str]) -> tuple[str, ...]:
        """The components of ``path`` relative to the root, lexically normalized.

        Raises a ``DENIED`` :class:`ToolError` when the path leaves the root.
        """
        text = os.fspath(path)
        if not isinstance(text, str):
            raise _denied(f"path {text!r} must be text")
        if "\x00" in text:
            raise _denied(f'path "{safe_text(text)}" contains a NUL character')
        candidate = PurePosixPath(text)
        components = candidate.parts
        if candidate.is_absolute():  # anchored at "/" or "//"
            inside = len(self._root_parts)
            if components[:inside] != self._root_parts:
                # the host may name the root through a symlinked prefix (/var -> /private/var);
                # only that prefix is resolved, never a link inside the workspace
                alias = self._alias_length(components)
                if alias is None:
                    raise _denied(
                        f'path "{safe_text(text)}" is outside the workspace '
                        f"{safe_text(str(self.root))}"
                    )
                inside = alias
            components = components[inside:]
        stack: list[str] = []
        for part in components:
            if part == "..":
                if not stack:
                    raise _denied(f'path "{safe_text(text)}" escapes the workspace through ".."')
                stack.pop()
            else:
                stack.append(part)
        return tuple(stack)

    def locate(self, path: str | os.PathLike[str]) -> str:
        """The absolute path the workspace tools open for ``path``: the root joined with
        :meth:`parts` (``..`` folded, absolute spellings and aliases of the root such as
        ``/proc/self/root/...`` recognised). Nothing is looked up past the root and links
        are not followed, as the tools follow none. Raises ``DENIED`` like :meth:`parts`.

        The file and search tools give it to permission rules as their resolution
        (:class:`~dsh_tools.ToolPaths`), so a rule judges the place a call opens.
        """
        return str(self.root.joinpath(*self.parts(path)))

    def tool_paths(self, *arguments: PathArgument) -> ToolPaths:
        """The declaration of a tool's path ``arguments``, resolved by :meth:`locate`."""
        return ToolPaths(arguments, resolve=self.locate)

    def _alias_length(self, components: tuple[str, ...]) -> int | None:
        """How many leading ``components`` of an absolute path name the root, following
        links as the OS does; ``None`` when no prefix does. The shortest prefix wins, so a
        link inside the root is never followed. One ``openat`` per component."""
        try:
            current = os.open("/", _DESCEND)
        except OSError:
            return None
        try:
            for length, part in enumerate(components[1:], 2):
                try:
                    step = os.open(part, _DESCEND, dir_fd=current)
                except OSError:
                    return None
                os.close(current)
                current = step
                if _identity(os.fstat(current)) == self._identity:
                    return length
            return None
        finally:
            os.close(current)

    def resolve(self, path: str | os.PathLike[str], *, must_exist: bool = True) -> Path:
        """The absolute path of ``path`` inside the root, checked component by component.

        Relative paths resolve against the root; absolute paths must lie inside it. Any
        existing component that is a symlink is refused (``DENIED``). A missing component
        raises a ``TOOL_ERROR`` :class:`ToolError` when ``must_exist`` is true; otherwise
        the rest of the path is taken as to-be-created (an existing non-directory in the
        middle is still an error).
        """
        parts = self.parts(path)
        self._lookup(parts, must_exist=must_exist)
        return self.root.joinpath(*parts)

    def display(self, path: str | os.PathLike[str]) -> str:
        """``path`` relative to the root with ``/`` separators (``.`` for the root)."""
        absolute = Path(os.fspath(path))
        if not absolute.is_absolute():
            absolute = self.root / absolute
        try:
            relative = absolute.relative_to(self.root)
        except ValueError:
            return safe_text(str(absolute))
        text = relative.as_posix()
        return safe_text(text) if text else "."

    def _show(self, parts: tuple[str, ...]) -> str:
        return self.display(self.root.joinpath(*parts))

    def _lookup(self, parts: tuple[str, ...], *, must_exist: bool) -> os.stat_result | None:
        """``lstat`` of the file ``parts`` names, walked from the root without following a
        link; ``None`` when a component is missing and ``must_exist`` is false."""
        current = self._open_root()
        try:
            for index, part in enumerate(parts):
                try:
                    info = os.stat(part, dir_fd=current, follow_symlinks=False)
                except FileNotFoundError:
                    if must_exist:
                        raise ToolError(
                            f'"{self._show(parts[: index + 1])}" does not exist'
                        ) from None
                    return None
                except OSError as error:
                    raise _os_error(error, self._show(parts[: index + 1])) from None
                if stat.S_ISLNK(info.st_mode):
                    raise _denied(
                        f'"{self._show(parts[: index + 1])}" is a symbolic link; '
                        "links are not followed in the workspace"
                    )
                if index == len(parts) - 1:
                    return info
                if not stat.S_ISDIR(info.st_mode):
                    raise ToolError(f'"{self._show(parts[: index + 1])}" is not a directory')
                step = self._step(current, part, _DESCEND, self._show(parts[: index + 1]))
                os.close(current)
                current = step
            return os.fstat(current)
        finally:
            os.close(current)

    def _open_root(self) -> int:
        """A descriptor of the root, proven to be the directory the workspace started with."""
        try:
            fd = os.open(self.root, _DESCEND | _NOFOLLOW)
        except OSError as error:
            if error.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                raise self._replaced() from None
            raise _os_error(error, ".") from None
        if _identity(os.fstat(fd)) != self._identity:
            os.close(fd)
            raise self._replaced()
        return fd

    def _replaced(self) -> ToolError:
        return _denied(
            f"the workspace root {safe_text(str(self.root))} is no longer the directory "
            "the tools started with (it was moved, removed or replaced)"
        )

    @staticmethod
    def _refuse_directory_syntax(path: str | os.PathLike[str]) -> None:
        """Refuse a path that names a directory by its spelling where a file is needed."""
        text = os.fspath(path)
        if isinstance(text, str):
            ending = next((end for end in _DIRECTORY_ENDINGS if text.endswith(end)), None)
            if ending is not None:
                raise ToolError(
                    f'"{safe_text(text)}" names a directory (it ends with "{ending}"), not a file'
                )

    # ------------------------------------------------------------------ opening

    def open(self, path: str | os.PathLike[str], *, directory: bool = False) -> Opened:
        """Open an existing file (or, with ``directory=True``, a directory) for reading.

        Raises ``DENIED`` for confinement violations and ``TOOL_ERROR`` for a missing
        path, a permission error, a directory where a file was expected (or the reverse,
        or a path ending in ``/`` for a file) and a special file (FIFO, device, socket),
        which is never opened for reading in blocking mode. Hard links are read.
        """
        parts = self.parts(self.resolve(path, must_exist=True))
        if not directory:
            self._refuse_directory_syntax(path)
        display = self._show(parts)
        flags = os.O_RDONLY | _CLOEXEC | _NONBLOCK | (_DIRECTORY if directory else 0)
        fd = self._open_at(parts, flags, display, make_parents=False)
        try:
            info = self._verify(fd, parts, display)
            if directory and not stat.S_ISDIR(info.st_mode):
                raise ToolError(f'"{display}" is not a directory')
            if not directory:
                if stat.S_ISDIR(info.st_mode):
                    raise ToolError(f'"{display}" is a directory, not a file')
                if not stat.S_ISREG(info.st_mode):
                    raise ToolError(f'"{display}" is not a regular file')
                os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return Opened(fd, self.root.joinpath(*parts), display, info)

    def open_for_write(
        self, path: str | os.PathLike[str], *, create: bool = True, make_parents: bool = True
    ) -> Opened:
        """Open a regular file for reading and writing; ``create`` makes it if missing.

        With ``create`` and ``make_parents``, missing parent directories are created
        inside the workspace. The file is never truncated here: the caller truncates
        after the descriptor has been verified, so a refused path never loses data.
        ``Opened.created`` says whether the file is new. A file with more than one hard
        link is refused (``DENIED``): writing would change its other names too, and they
        may lie outside the workspace.
        """
        parts = self.parts(self.resolve(path, must_exist=not create))
        self._refuse_directory_syntax(path)
        if not parts:
            raise ToolError('"." is the workspace root, not a file')
        existed = self._lookup(parts, must_exist=False) is not None
        display = self._show(parts)
        flags = os.O_RDWR | _CLOEXEC | _NONBLOCK | (os.O_CREAT if create else 0)
        fd = self._open_at(parts, flags, display, make_parents=create and make_parents)
        try:
            info = self._verify(fd, parts, display)
            if not stat.S_ISREG(info.st_mode):
                raise ToolError(f'"{display}" is not a regular file')
            if info.st_nlink > 1:
                raise _denied(
                    f'"{display}" has {info.st_nlink} hard links; writing through it would '
                    "change every linked name, which may lie outside the workspace, so it is "
                    "not written (reading is allowed)"
                )
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return Opened(fd, self.root.joinpath(*parts), display, info, created=not existed)

    def _open_at(
        self, parts: tuple[str, ...], flags: int, display: str, *, make_parents: bool
    ) -> int:
        """Walk ``parts`` from the root with ``O_NOFOLLOW`` at every step; return the fd."""
        current = self._open_root()
        try:
            for index, part in enumerate(parts[:-1]):
                if make_parents:
                    try:
                        os.mkdir(part, 0o777, dir_fd=current)
                    except FileExistsError:
                        pass
                    except OSError as error:
                        raise _os_error(error, self._show(parts[: index + 1])) from None
                step = self._step(current, part, _DESCEND, self._show(parts[: index + 1]))
                os.close(current)
                current = step
            if not parts:
                return os.open(".", flags, dir_fd=current)
            return self._step(current, parts[-1], flags, display)
        finally:
            os.close(current)

    def _step(self, dir_fd: int, name: str, flags: int, display: str) -> int:
        try:
            return os.open(name, flags | _NOFOLLOW, 0o666, dir_fd=dir_fd)
        except OSError as error:
            if error.errno == errno.ELOOP or (
                error.errno == errno.ENOTDIR and _is_link(dir_fd, name)
            ):
                raise _denied(
                    f'"{display}" is a symbolic link; links are not followed in the workspace'
                ) from None
            raise _os_error(error, display) from None

    def _verify(self, fd: int, parts: tuple[str, ...], display: str) -> os.stat_result:
        """Prove that ``fd`` is the file ``parts`` names, inside the root, no links."""
        info = os.fstat(fd)
        proc = f"{_PROC_FD}/{fd}"
        if os.path.isdir(_PROC_FD):
            try:
                real = os.readlink(proc)
            except OSError:
                real = None
            if real is not None and not self._inside(real):
                raise _denied(f'"{display}" resolved outside the workspace while it was opened')
        try:
            now = self._lookup(parts, must_exist=True)
        except ToolError as error:
            raise _denied(f'"{display}" changed while it was opened: {error.message}') from None
        if now is None or _identity(now) != _identity(info):
            raise _denied(f'"{display}" changed while it was opened')
        return info

    def _inside(self, real: str) -> bool:
        root = str(self.root)
        return real == root or real.startswith(root.rstrip(os.sep) + os.sep)

    # ------------------------------------------------------------------ walking

    def walk_files(
        self,
        start: Opened,
        *,
        skip: frozenset[str] = frozenset({".git"}),
        entry_filter: WalkFilter | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> Iterator[WorkspaceFile]:
        """Every regular file under the directory ``start``, depth-first in name order.

        Symlinks are never followed nor reported; directories named in ``skip`` are not
        entered, nor is anything ``entry_filter`` refuses. Unreadable directories are passed
        over silently. The walk is iterative (any depth) and holds at most
        :data:`WALK_OPEN_DIRECTORIES` descriptors besides ``start``'s; a directory
        reopened on the way back must still be the one first entered (same
        ``st_dev``/``st_ino``), or the rest of it is skipped. ``stop`` is polled once per
        directory; when it returns true the walk ends.
        """
        return _walk.walk_files(start.fd, start.display, skip, entry_filter, stop)

    def open_walked(self, found: WorkspaceFile) -> tuple[int, os.stat_result]:
        """Open a file met by :meth:`walk_files` for reading (no links, non-regular refused).

        Returns the descriptor and its ``fstat``; the caller closes the descriptor. It is
        opened non-blocking, so a FIFO swapped in cannot hang the open; for the regular
        file it must be, that flag changes nothing.
        """
        return _walk.open_walked(found)


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _os_error(error: OSError, display: str) -> ToolError:
    if isinstance(error, FileNotFoundError):
        return ToolError(f'"{display}" does not exist')
    if isinstance(error, PermissionError):
        return ToolError(f'cannot open "{display}": permission denied')
    if isinstance(error, IsADirectoryError):
        return ToolError(f'"{display}" is a directory, not a file')
    if isinstance(error, NotADirectoryError):
        return ToolError(f'"{display}" is not a directory')
    return ToolError(f'cannot open "{display}": {error.strerror or error}')
