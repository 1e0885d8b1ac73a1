"""Confinement of file tools to one workspace root. Nothing else.

Every path a tool receives goes through :class:`Workspace`. A path is refused with
``ToolError(..., code=ErrorCode.DENIED)`` when it

* escapes the root lexically (``../x``, ``a/../../x``) or is absolute outside it;
* crosses a symbolic link at any component, the final one included (links are never
  followed, even when they point back inside the root: a link can be swapped later).

Checking a path and then opening it by name is racy: a directory can be swapped for a
symlink in between. So opening never re-walks the path by name. It walks it component by
component from a descriptor of the root, with ``openat(..., O_NOFOLLOW)`` at every step,
and then verifies the opened descriptor: its real path (``/proc/self/fd`` where the
platform has it) must lie inside the root, the path must still be symlink-free, and the
descriptor must be the very file (``st_dev``/``st_ino``) the path names now. A swap at
any moment either makes a step fail (``ELOOP``/``ENOTDIR``) or fails the verification.

POSIX only (Linux, macOS, BSD): it relies on ``dir_fd`` support in :mod:`os`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import attrs

from dsh_tools.errors import ErrorCode, ToolError

__all__ = ["Opened", "Workspace", "WorkspaceFile"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_PROC_FD = "/proc/self/fd"


def _denied(message: str) -> ToolError:
    return ToolError(message, code=ErrorCode.DENIED)


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


@attrs.frozen
class WorkspaceFile:
    """A regular file met while walking: its display path, parent descriptor and name.

    ``parent_fd`` is only valid during the iteration step that yields the record.
    """

    display: str
    parent_fd: int
    name: str
    size: int


class Workspace:
    """A directory that tools may read and write in; everything outside is refused.

    ``root`` must be an existing directory; it is resolved once (symlinks in the root
    path itself are the host's choice and are allowed).
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        real = Path(os.path.realpath(os.fspath(root)))
        if not real.is_dir():
            raise ValueError(f"workspace root {os.fspath(root)!r} is not a directory")
        self.root: Path = real

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
            raise _denied(f'path "{text}" contains a NUL character')
        candidate = PurePosixPath(text)
        if candidate.is_absolute():
            root = PurePosixPath(self.root)
            if candidate != root and root not in candidate.parents:
                # the host may name the root through a symlinked prefix (/var -> /private/var);
                # only that prefix is resolved, never a link inside the workspace
                base = next(
                    (
                        a
                        for a in (candidate, *candidate.parents)
                        if os.path.realpath(a) == str(self.root)
                    ),
                    None,
                )
                if base is None:
                    raise _denied(f'path "{text}" is outside the workspace {self.root}')
                root = base
            relative = candidate.relative_to(root).parts
        else:
            relative = candidate.parts
        stack: list[str] = []
        for part in relative:
            if part in ("", "."):
                continue
            if part == "..":
                if not stack:
                    raise _denied(f'path "{text}" escapes the workspace through ".."')
                stack.pop()
            else:
                stack.append(part)
        return tuple(stack)

    def resolve(self, path: str | os.PathLike[str], *, must_exist: bool = True) -> Path:
        """The absolute path of ``path`` inside the root, checked component by component.

        Relative paths resolve against the root; absolute paths must lie inside it. Any
        existing component that is a symlink is refused (``DENIED``). A missing component
        raises a ``TOOL_ERROR`` :class:`ToolError` when ``must_exist`` is true; otherwise
        the rest of the path is taken as to-be-created (an existing non-directory in the
        middle is still an error).
        """
        parts = self.parts(path)
        current = self.root
        for index, part in enumerate(parts):
            current = current / part
            try:
                info = os.lstat(current)
            except FileNotFoundError:
                if must_exist:
                    raise ToolError(f'"{self.display(current)}" does not exist') from None
                return current.joinpath(*parts[index + 1 :])
            except NotADirectoryError:
                raise ToolError(f'"{self.display(current.parent)}" is not a directory') from None
            if stat.S_ISLNK(info.st_mode):
                raise _denied(
                    f'"{self.display(current)}" is a symbolic link; '
                    "links are not followed in the workspace"
                )
            if index < len(parts) - 1 and not stat.S_ISDIR(info.st_mode):
                raise ToolError(f'"{self.display(current)}" is not a directory')
        return current

    def display(self, path: str | os.PathLike[str]) -> str:
        """``path`` relative to the root with ``/`` separators (``.`` for the root)."""
        absolute = Path(os.fspath(path))
        if not absolute.is_absolute():
            absolute = self.root / absolute
        try:
            relative = absolute.relative_to(self.root)
        except ValueError:
            return str(absolute)
        text = relative.as_posix()
        return text if text else "."

    # ------------------------------------------------------------------ opening

    def open(self, path: str | os.PathLike[str], *, directory: bool = False) -> Opened:
        """Open an existing file (or, with ``directory=True``, a directory) for reading.

        Raises ``DENIED`` for confinement violations and ``TOOL_ERROR`` for a missing
        path, a permission error, a directory where a file was expected (or the reverse)
        and a special file (FIFO, device, socket), which is never opened for reading
        in blocking mode.
        """
        target = self.resolve(path, must_exist=True)
        parts = self.parts(target)
        display = self.display(target)
        flags = os.O_RDONLY | _CLOEXEC | _NONBLOCK | (_DIRECTORY if directory else 0)
        fd = self._open_at(parts, flags, display, make_parents=False)
        try:
            info = self._verify(fd, target)
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
        return Opened(fd, target, display, info)

    def open_for_write(
        self, path: str | os.PathLike[str], *, create: bool = True, make_parents: bool = True
    ) -> Opened:
        """Open a regular file for reading and writing; ``create`` makes it if missing.

        With ``create`` and ``make_parents``, missing parent directories are created
        inside the workspace. The file is never truncated here: the caller truncates
        after the descriptor has been verified, so a refused path never loses data.
        ``Opened.created`` says whether the file is new.
        """
        target = self.resolve(path, must_exist=not create)
        parts = self.parts(target)
        if not parts:
            raise ToolError('"." is the workspace root, not a file')
        display = self.display(target)
        existed = os.path.lexists(target)
        flags = os.O_RDWR | _CLOEXEC | _NONBLOCK | (os.O_CREAT if create else 0)
        fd = self._open_at(parts, flags, display, make_parents=create and make_parents)
        try:
            info = self._verify(fd, target)
            if not stat.S_ISREG(info.st_mode):
                raise ToolError(f'"{display}" is not a regular file')
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return Opened(fd, target, display, info, created=not existed)

    def _open_at(
        self, parts: tuple[str, ...], flags: int, display: str, *, make_parents: bool
    ) -> int:
        """Walk ``parts`` from the root with ``O_NOFOLLOW`` at every step; return the fd."""
        current = os.open(self.root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
        try:
            for index, part in enumerate(parts[:-1]):
                if make_parents:
                    try:
                        os.mkdir(part, 0o777, dir_fd=current)
                    except FileExistsError:
                        pass
                    except OSError as error:
                        raise _os_error(error, "/".join(parts[: index + 1])) from None
                step = self._step(
                    current, part, os.O_RDONLY | _DIRECTORY | _CLOEXEC, "/".join(parts[: index + 1])
                )
                os.close(current)
                current = step
            if not parts:
                return os.dup(current)
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

    def _verify(self, fd: int, expected: Path) -> os.stat_result:
        """Prove that ``fd`` is the file ``expected`` names, inside the root, no links."""
        display = self.display(expected)
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
            again = self.resolve(expected, must_exist=True)
            now = os.lstat(again)
        except ToolError as error:
            raise _denied(f'"{display}" changed while it was opened: {error.message}') from None
        except OSError:
            raise _denied(f'"{display}" changed while it was opened') from None
        if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
            raise _denied(f'"{display}" changed while it was opened')
        return info

    def _inside(self, real: str) -> bool:
        root = str(self.root)
        return real == root or real.startswith(root.rstrip(os.sep) + os.sep)

    # ------------------------------------------------------------------ walking

    def walk_files(
        self, start: Opened, *, skip: frozenset[str] = frozenset({".git"})
    ) -> Iterator[WorkspaceFile]:
        """Every regular file under the directory ``start``, depth-first in name order.

        Symlinks are never followed nor reported; directories named in ``skip`` are not
        entered. Unreadable directories are passed over silently.
        """
        prefix = "" if start.display == "." else start.display + "/"
        yield from self._walk(start.fd, prefix, skip)

    def _walk(self, dir_fd: int, prefix: str, skip: frozenset[str]) -> Iterator[WorkspaceFile]:
        try:
            with os.scandir(dir_fd) as scan:
                entries = sorted(scan, key=lambda entry: entry.name)
        except OSError:
            return
        for entry in entries:
            try:
                if entry.is_symlink():
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if entry.name in skip:
                        continue
                    try:
                        child = os.open(
                            entry.name,
                            os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC,
                            dir_fd=dir_fd,
                        )
                    except OSError:
                        continue
                    try:
                        yield from self._walk(child, f"{prefix}{entry.name}/", skip)
                    finally:
                        os.close(child)
                elif entry.is_file(follow_symlinks=False):
                    size = entry.stat(follow_symlinks=False).st_size
                    yield WorkspaceFile(f"{prefix}{entry.name}", dir_fd, entry.name, size)
            except OSError:
                continue

    def open_walked(self, found: WorkspaceFile) -> int:
        """Open a file met by :meth:`walk_files` (no links, non-blocking refused)."""
        fd = os.open(
            found.name, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | _NONBLOCK, dir_fd=found.parent_fd
        )
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ToolError(f'"{found.display}" is not a regular file')
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd


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
