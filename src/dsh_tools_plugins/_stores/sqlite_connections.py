"""This thread's connection to a store's SQLite file, kept open between operations.

Opening a connection costs more than most statements a store runs (each new connection
reads the file's whole schema again), and a journaled call makes two operations. So
each thread keeps the connection its last operation used, and reuses it while:

* the process is the one that opened it: a forked child opens its own and never uses,
  or even closes, its parent's (SQLite forbids carrying a connection across ``fork``);
* the file at the path is still the file it opened (same device and inode): a file
  replaced or deleted meanwhile is opened anew, so no write lands in a file that is no
  longer at the path;
* its last operation ended cleanly: one that raised closes it, so a kept connection
  never holds an open transaction or a lock.

Nothing else changes: every operation is still its own transaction, so several threads,
registries and processes share one file as before.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

__all__ = ["ThreadConnections"]

_Identity = tuple[int, int]
"""The device and inode of the file a connection opened."""

_INHERITED: list[sqlite3.Connection] = []
"""Connections a forked child found in its thread's slot: kept referenced, so that no
garbage collection closes them in a process that must not touch them."""


class ThreadConnections:
    """One kept connection per thread to the SQLite file ``path``, in autocommit mode
    (``isolation_level=None``: each operation begins and ends its own transaction)."""

    def __init__(self, path: Path, timeout_s: float) -> None:
        self._path = path
        self._timeout_s = timeout_s
        self._kept = threading.local()

    @contextlib.contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection for one operation: kept after it when the operation
        ended cleanly and left no transaction open, closed otherwise."""
        connection, identity = self._take()
        try:
            yield connection
        except BaseException:
            connection.close()
            raise
        if connection.in_transaction or identity is None:
            connection.close()
        else:
            self._kept.slot = (connection, os.getpid(), identity)

    def _take(self) -> tuple[sqlite3.Connection, _Identity | None]:
        """The kept connection when it may still be used, else a new one, and the
        identity of the file it has open."""
        identity = self._identity()
        slot = getattr(self._kept, "slot", None)
        self._kept.slot = None
        if slot is not None:
            kept, pid, opened = slot
            if pid != os.getpid():
                _INHERITED.append(kept)
            elif opened == identity:
                return kept, identity
            else:
                kept.close()
        connection = sqlite3.connect(self._path, timeout=self._timeout_s, isolation_level=None)
        # Kept only if the file did not change while it was opened.
        return connection, identity if self._identity() == identity else None

    def _identity(self) -> _Identity | None:
        try:
            info = os.stat(self._path, follow_symlinks=False)
        except OSError:
            return None
        return info.st_dev, info.st_ino
