"""Connections to the PostgreSQL approval store: the URL (shown without its password),
a few idle connections kept for reuse, errors turned into the store's error, and the
schema checked (or, when asked, created) on the first connection.

A server that restarts (or drops a connection) tells each idle connection so on its
socket; such a connection is closed when it is next taken, before any statement is sent
on it, and a new one is made in its place. While the server is down every operation
fails (closed: :class:`ApprovalStoreError`); the first one after it is back reconnects.

:mod:`dsh_tools_plugins.approval_postgres` is the public face.
"""

from __future__ import annotations

import re
import select
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from .error import ApprovalStoreError

if TYPE_CHECKING:
    import psycopg

    Prepare = Callable[[psycopg.Connection[tuple[object, ...]]], object]

__all__ = ["Connections", "shown_url"]

_T = TypeVar("_T")
_IDLE = 4
"""Idle connections kept per store; more are opened while more threads are busy."""
_BUSY = 12
"""The most connections a store has in use at once; more threads wait for one (however
many calls a process runs, its share of the server's connection limit stays bounded)."""

_PASSWORD = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/@:]*:([^/@]*)@")


def shown_url(url: str) -> str:
    """``url`` as it may be shown: scheme, user, host, port and database, no password
    and no options."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(url)
    except Exception:
        return "an unreadable PostgreSQL URL"
    user = f"{parts['user']}@" if parts.get("user") else ""
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{user}{parts.get('host', '')}{port}/{parts.get('dbname', '')}"


def _secrets(url: str) -> list[str]:
    """The password in ``url`` in each spelling a message could repeat."""
    from urllib.parse import unquote

    found = _PASSWORD.match(url)
    if found is None or not found.group(1):
        return []
    return sorted({found.group(1), unquote(found.group(1))}, key=len, reverse=True)


class Connections:
    """Connections to one database, each used by one thread at a time; ``prepare`` runs
    in a transaction on the first one (checking the schema, or creating it), ``None``
    runs nothing."""

    def __init__(self, url: str, timeout_s: float, prepare: Prepare | None) -> None:
        self.url = url
        self.shown = shown_url(url)
        self.timeout_s = timeout_s
        self._idle: list[psycopg.Connection[tuple[object, ...]]] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(_BUSY)
        self._prepare = prepare
        # Idle connections close when the store is dropped or the process ends.
        weakref.finalize(self, _close_all, self._idle, self._lock)

    def run(self, work: Callable[[psycopg.Connection[tuple[object, ...]]], _T]) -> _T:
        """``work`` done on a connection in a transaction of its own; any failure is an
        :class:`ApprovalStoreError` naming the store (never its password)."""
        with self.connection() as connection, self.errors(), connection.transaction():
            return work(connection)

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
        """A connection for the caller alone, kept for reuse when it is still sound; at
        most :data:`_BUSY` at a time (waiting up to ``timeout_s`` for one)."""
        if not self._slots.acquire(timeout=self.timeout_s):
            raise ApprovalStoreError(
                self.redacted(f"all {_BUSY} connections stayed busy for {self.timeout_s:g} s")
            )
        try:
            connection = self._reused()
            if connection is None:
                connection = self.connect()
            try:
                yield connection
            finally:
                with self._lock:
                    if connection.broken or connection.closed or len(self._idle) >= _IDLE:
                        connection.close()
                    else:
                        self._idle.append(connection)
        finally:
            self._slots.release()

    def _reused(self) -> psycopg.Connection[tuple[object, ...]] | None:
        """An idle connection that is still sound, or ``None``; the ones the server ended
        while they were idle are closed on the way."""
        while True:
            with self._lock:
                connection = self._idle.pop() if self._idle else None
            if connection is None or not _ended(connection):
                return connection
            connection.close()

    def connect(self) -> psycopg.Connection[tuple[object, ...]]:
        """A new connection, outside the pool: the caller closes it."""
        with self.errors():
            return self._connect()

    @contextmanager
    def errors(self) -> Iterator[None]:
        """Turn what the driver raises into :class:`ApprovalStoreError`."""
        import psycopg

        try:
            yield
        except (psycopg.Error, ValueError) as error:  # ValueError: text the server cannot hold
            raise ApprovalStoreError(self.redacted(error)) from None

    def redacted(self, error: BaseException | str) -> str:
        text = " ".join(str(error).split()) or type(error).__qualname__
        for secret in _secrets(self.url):
            text = text.replace(secret, "***")
        return f"approval store {self.shown}: {text}"

    def close(self) -> None:
        _close_all(self._idle, self._lock)

    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        import psycopg

        connection = psycopg.connect(
            self.url,
            autocommit=True,
            connect_timeout=max(1, round(self.timeout_s)),
            application_name="dsh-tools approvals",
        )
        try:
            milliseconds = max(1, round(self.timeout_s * 1000))
            connection.execute(f"SET statement_timeout = {milliseconds}")
            connection.execute(f"SET lock_timeout = {milliseconds}")
            prepare = self._prepare  # threads connecting at once may each run it
            if prepare is not None:
                with connection.transaction():
                    prepare(connection)
                self._prepare = None
        except BaseException:
            connection.close()
            raise
        return connection


def _ended(connection: psycopg.Connection[tuple[object, ...]]) -> bool:
    """Whether the server said something to an idle connection: nothing is asked on
    it, so what it says is that it ends (a restart, a terminated backend) or has
    ended (its socket closed). One ``select`` with no wait, no round trip."""
    if connection.closed or connection.broken:
        return True
    try:
        readable, _, _ = select.select([connection.fileno()], [], [], 0)
    except ValueError:  # a descriptor beyond select's reach: used as it is
        return False
    return bool(readable)


def _close_all(idle: list[psycopg.Connection[tuple[object, ...]]], lock: threading.Lock) -> None:
    with lock:
        connections = idle[:]
        idle.clear()
    for connection in connections:
        connection.close()
