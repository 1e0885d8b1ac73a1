"""The audit log's file: whole lines appended durably, by one writer at a time across
processes, and never waiting for another writer on an event loop.

:class:`AuditFile` appends each batch of lines with a single ``write`` followed by
``os.fsync``, holding this process's lock of the file and an exclusive ``flock`` on
``path + ".lock"`` (the kernel releases it when its holder dies, even by SIGKILL). A
writer killed inside its ``write`` can leave a torn last record; the next writer, holding
the lock, cuts the file back to its last newline before it appends, so every record lands
whole or not at all and no two records mix, whatever process is killed. Rotation is by
size, under the same lock.

Waiting for that lock (another process may hold it for as long as its own write and
``fsync`` take, or for as long as it is stopped) must not stall an event loop. On an event
loop, :meth:`AuditFile.appended` writes at once only when both locks are free at
once (the loop then waits for this write's own ``fsync``, nothing else); when another
writer holds one, it returns an awaitable of the write done in a worker thread. It does
not always move to a thread: a host that drops a call by closing its coroutine still
gets its result written, and a closed coroutine can no longer await.
:mod:`dsh_tools_plugins.audit` is the public face.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import weakref
from collections.abc import Awaitable, Iterator

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from dsh_tools._hostfiles import open_host_file
from dsh_tools._pipeline.loops import on_event_loop

__all__ = ["AuditFile"]

logger = logging.getLogger("dsh_tools")


class AuditFile:
    """The log file at ``path``: rotated before it would grow past ``max_bytes``, keeping
    ``backups`` rotated files (``path.1`` the newest)."""

    def __init__(self, path: str, max_bytes: int, backups: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self._lock = _file_lock(path)
        self._lock_path = path + ".lock"

    def appended(self, data: bytes) -> Awaitable[None] | None:
        """Append ``data`` and return ``None``, or an awaitable that appends it: on an
        event loop, when another writer holds the file (its lock is not free at
        once), the append waits for it in a worker thread, so the loop never does; it
        finishes even if its awaiter is cancelled meanwhile, then the cancellation goes
        on. Anywhere else it appends at once, waiting its turn."""
        if not on_event_loop():
            self.append(data)
            return None
        if not self._lock.acquire(blocking=False):
            return self._append_in_thread(data)
        try:
            with _process_lock(self._lock_path, wait=False) as held:
                if held:
                    self._write(data)
                    return None
        finally:
            self._lock.release()
        return self._append_in_thread(data)

    async def _append_in_thread(self, data: bytes) -> None:
        import anyio
        import anyio.to_thread

        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.append, data)

    def append(self, data: bytes) -> None:
        """Append ``data`` under the file's locks, waiting for them."""
        with self._lock, _process_lock(self._lock_path, wait=True):
            self._write(data)

    def _write(self, data: bytes) -> None:
        """Append ``data`` (whole lines) durably; the caller holds the locks. First cut a
        torn tail a killed writer left, and rotate if ``data`` would not fit."""
        fd = self._open()
        try:
            size = os.fstat(fd).st_size
            if size and _last_byte(fd, size) != b"\n":
                size = _cut_torn_tail(fd, size)
            if size and size + len(data) > self.max_bytes:
                os.close(fd)
                fd = -1
                self._rotate()
                fd = self._open()
            view = memoryview(data)
            while view:  # one write for a line in practice; loops only on a short write
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            if fd >= 0:
                os.close(fd)

    def _open(self) -> int:
        return open_host_file(
            self.path, _FLAGS, what="the audit log", mode=0o600, make_parents=0o700
        )

    def _rotate(self) -> None:
        if self.backups == 0:
            os.remove(self.path)
        else:
            for index in range(self.backups, 0, -1):
                source = self.path if index == 1 else f"{self.path}.{index - 1}"
                if os.path.exists(source):
                    os.replace(source, f"{self.path}.{index}")
        _fsync_directory(os.path.dirname(self.path) or ".")


_FILE_LOCKS: weakref.WeakValueDictionary[str, threading.Lock] = weakref.WeakValueDictionary()
_FILE_LOCKS_GUARD = threading.Lock()


def _file_lock(path: str) -> threading.Lock:
    """The one lock of every writer in this process of the file ``path``."""
    key = os.path.realpath(path)
    with _FILE_LOCKS_GUARD:
        lock = _FILE_LOCKS.get(key)
        if lock is None:
            lock = _FILE_LOCKS[key] = threading.Lock()
        return lock


_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CREAT


def _last_byte(fd: int, size: int) -> bytes:
    return os.pread(fd, 1, size - 1)


def _cut_torn_tail(fd: int, size: int) -> int:
    """Truncate the file after its last newline (a record a killed writer left half
    written goes; whole records stay) and return the new size."""
    end = size
    while end > 0:
        start = max(0, end - _TAIL_CHUNK)
        newline = os.pread(fd, end - start, start).rfind(b"\n")
        if newline >= 0:
            end = start + newline + 1
            break
        end = start
    logger.warning("audit log: cut a torn last record of %d bytes", size - end)
    os.ftruncate(fd, end)
    return end


_TAIL_CHUNK = 64 * 1024


@contextlib.contextmanager
def _process_lock(path: str, *, wait: bool) -> Iterator[bool]:
    """Hold the exclusive ``flock`` of ``path`` (the kernel drops it when its holder dies,
    even by SIGKILL) and yield ``True``; without ``wait``, yield ``False`` at once when
    another holds it. Without ``fcntl`` (Windows) only this process's lock applies."""
    if fcntl is None:  # pragma: no cover - Windows
        yield True
        return
    fd = open_host_file(path, os.O_RDWR | os.O_CREAT, what="the audit log's lock", mode=0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing the only descriptor releases the lock


def _fsync_directory(directory: str) -> None:
    """Make renames durable where the platform allows fsync on a directory."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - Windows cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some filesystems refuse
        pass
    finally:
        os.close(fd)
