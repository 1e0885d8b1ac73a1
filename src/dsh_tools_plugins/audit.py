"""A durable JSON Lines audit log of every tool call and its result, and its replay.

:class:`AuditLog` is a plugin with two hooks:

* a ``tryfirst`` ``dsh_tools_guard`` that writes a ``tool/call`` event once policy has
  allowed the call, and never denies. Guards run once per call, after pre-execute and
  approval and before the execute wrappers and the body, so the event is on disk before
  the body starts whatever other plugins decide first, and a wrapper that retries still
  gives one event per call. (In pre-execute, a ``tryfirst`` plugin deciding first would
  skip it; as an execute wrapper, it would cost every ``execute_sync`` call an event
  loop.) A dry run (``registry.explain``: ``execution.dry_run``) writes nothing;
* a ``dsh_tools_result`` observer that writes the ``tool/result`` event, with the call's
  decision record (:class:`dsh_tools.records.DecisionRecord`, what each stage decided) as
  ``record``. Calls that never pass the guards (denied, arguments that are not JSON, a
  call cancelled or a policy failing before them) get their ``tool/call`` event written
  here, with the result.

Every event is one line of compact JSON (UTF-8), written with a single ``write`` of the
whole line followed by ``os.fsync``, while holding an exclusive ``flock`` on
``path + ".lock"`` (the kernel releases it when its holder dies, even by SIGKILL). A
writer killed inside its ``write`` can leave a torn last record; the next writer, holding
the lock, cuts the file back to its last newline before it appends, so every record lands
whole or not at all and no two records mix, whatever process is killed. When
``execute()`` returns, the result is on disk, so a process killed between calls loses
nothing, and one killed in the middle of a call still has the call's ``tool/call`` event.
A call event that cannot be written denies the call (a raising guard denies): a call is
not run unrecorded. Events::

    {"event": "tool/call", "time": "2026-01-02T03:04:05.678901+00:00",
     "call_id": "c1", "root_call_id": "c1", "agent": null, "name": "read_file",
     "arguments": {"path": "a.txt"}}
    {"event": "tool/result", "time": "...", "started": "...", "duration_ms": 1.25,
     "call_id": "c1", "root_call_id": "c1", "agent": null, "name": "read_file",
     "is_error": false, "content": [{"type": "text", "text": "..."}], "error": null,
     "meta": null, "record": {"call_id": "c1", "outcome": "ok", "steps": [...], ...}}

``error`` is ``{"message": ..., "info": {"name": ..., "code": ...}}`` for failures.
``duration_ms`` runs from the ``tool/call`` event (0 for calls that never passed the
guards). Times are ISO 8601 in UTC.

No event is ever dropped for its text. ``call_id``, ``root_call_id``, ``agent`` and
``name`` are always written as strings (a host's integer call id ``7`` as ``"7"``), and
text that is not valid Unicode (lone surrogates, as Python decodes file names whose bytes
are not UTF-8) is written with U+FFFD in their place, the project's one rule
(:func:`dsh_tools.json.unicode_text`).

Rotation is by size: before a write would take the file past ``max_bytes``, ``path`` is
renamed to ``path.1`` (``path.1`` to ``path.2`` and so on, the oldest beyond ``backups``
deleted) and a new file is started. Writers open the file only once they hold the lock,
so several processes appending to one file rotate it in turn. A write blocks the calling
thread (guards are synchronous, so an event loop too) for its ``fsync`` and, when another
process is writing, for that one write and ``fsync``: the lock is held across nothing else.

:func:`read_audit_log` reads events back, tolerating a torn line (a process killed in the
middle of a write) and reading the integer call ids that version 0.1.0 wrote as their
strings; :func:`replay` pairs calls with their results and turns them into presentation
cards through :mod:`dsh_tools.presenting`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from dsh_tools.hookspecs import hookimpl
from dsh_tools.hostfiles import check_host_file, open_host_file
from dsh_tools.json import thaw, unicode_text
from dsh_tools.models import (
    ExecutionToken,
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionResult,
)

from ._audit_reading import (
    CALL_EVENT,
    RESULT_EVENT,
    AuditEvent,
    AuditLogError,
    ReplayedCall,
    read_audit_log,
    replay,
)

if TYPE_CHECKING:
    from dsh_tools.records import DecisionRecord

__all__ = [
    "AuditEvent",
    "AuditLog",
    "AuditLogError",
    "CALL_EVENT",
    "RESULT_EVENT",
    "ReplayedCall",
    "read_audit_log",
    "replay",
]

logger = logging.getLogger("dsh_tools")

_MiB = 1024 * 1024


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _encode(event: dict[str, Any]) -> bytes:
    text = json.dumps(event, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates can only sit inside strings (JSON's own syntax is ASCII), so
        # replacing them in the whole line replaces them in every string of the event.
        return (unicode_text(text) + "\n").encode("utf-8")


def _text(value: object) -> str:
    """An identity field as the string the log writes (a host's integer id as digits)."""
    if type(value) is str:
        return value
    try:
        return str(value)
    except Exception:  # a value whose str() fails (or an int too long for text)
        return f"<{type(value).__qualname__}>"


def _identity(execution: ToolExecution) -> dict[str, Any]:
    agent = execution.agent
    return {
        "call_id": _text(execution.call_id),
        "root_call_id": _text(execution.root_call_id),
        "agent": None if agent is None else _text(agent),
        "name": _text(execution.name),
    }


_FILE_LOCKS: weakref.WeakValueDictionary[str, threading.Lock] = weakref.WeakValueDictionary()
_FILE_LOCKS_GUARD = threading.Lock()


def _file_lock(path: str) -> threading.Lock:
    """The one lock of every :class:`AuditLog` in this process writing the file ``path``."""
    key = os.path.realpath(path)
    with _FILE_LOCKS_GUARD:
        lock = _FILE_LOCKS.get(key)
        if lock is None:
            lock = _FILE_LOCKS[key] = threading.Lock()
        return lock


class AuditLog:
    """Appends ``tool/call`` and ``tool/result`` events for every call to ``path``.

    :param path: the log file (created with mode ``0600``, and its missing parent
        directories with ``0700``). It is a host file (:mod:`dsh_tools.hostfiles`): a
        path inside the workspace, through a symbolic link or to anything but a regular
        file raises :class:`~dsh_tools.hostfiles.HostFileError` here, and each event opens
        it again the same way and appends to that descriptor, so a link planted later
        fails the write (and the call) rather than being followed.
    :param max_bytes: rotate before the file would grow past this size.
    :param backups: rotated files to keep (``path.1`` is the newest); ``0`` keeps none.

    Thread-safe, and safe with other instances on the same file in this process (they
    share one lock). The file is opened for each event and closed after its ``fsync``
    (the open costs little next to the ``fsync``), so there is nothing to close and other
    tools may rotate or truncate the file between events.

    What it remembers of a call in flight lives as long as the call's
    :class:`~dsh_tools.models.ToolExecution`: a call whose result is never observed (a
    host dropping it, an exception the pipeline does not contain) leaves nothing behind.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, max_bytes: int = 10 * _MiB, backups: int = 3
    ) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError(f"AuditLog max_bytes must be a positive integer, got {max_bytes!r}")
        if isinstance(backups, bool) or not isinstance(backups, int) or backups < 0:
            raise ValueError(f"AuditLog backups must be an integer >= 0, got {backups!r}")
        self.path = os.fspath(path)
        check_host_file(self.path, what="the audit log", make_parents=0o700)
        self.max_bytes = max_bytes
        self.backups = backups
        self._lock = _file_lock(self.path)
        self._lock_path = self.path + ".lock"
        self._started: dict[ExecutionToken, tuple[str, float]] = {}

    # ------------------------------------------------------------------ hooks

    @hookimpl(tryfirst=True)
    def dsh_tools_guard(self, execution: ToolExecution) -> None:
        if execution.dry_run:
            return
        time_text, started = _now(), time.perf_counter()
        self._write(_encode(self._call_event(execution, time_text)))
        token = execution.token
        self._started[token] = (time_text, started)
        weakref.finalize(execution, self._started.pop, token, None)

    @hookimpl
    def dsh_tools_result(
        self, execution: ToolExecution, result: ToolExecutionResult, record: DecisionRecord
    ) -> None:
        finished_text, finished = _now(), time.perf_counter()
        started = self._started.pop(execution.token, None)
        lines = b""
        if started is None:  # never passed the guards: the call event goes with the result
            started = (finished_text, finished)
            lines = _encode(self._call_event(execution, finished_text))
        event = {
            "event": RESULT_EVENT,
            "time": finished_text,
            "started": started[0],
            "duration_ms": round((finished - started[1]) * 1000, 3),
            **_identity(execution),
            "is_error": result.is_error,
            "content": thaw(result.content),
            "error": None,
            "meta": thaw(result.meta),
            "record": record.to_json(),
        }
        if isinstance(result, ToolExecutionFailure):
            info = result.error.info
            event["error"] = {
                "message": result.error.message,
                "info": {"name": info.name, "code": info.code},
            }
        self._write(lines + _encode(event))

    @staticmethod
    def _call_event(execution: ToolExecution, time_text: str) -> dict[str, Any]:
        arguments = execution.arguments
        return {
            "event": CALL_EVENT,
            "time": time_text,
            **_identity(execution),
            "arguments": None if arguments is None else thaw(arguments),
        }

    # ------------------------------------------------------------------ file

    def _write(self, data: bytes) -> None:
        """Append ``data`` (whole lines) durably under the file's lock; first cut a torn
        tail a killed writer left, and rotate if ``data`` would not fit."""
        with self._lock, _process_lock(self._lock_path):
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

    def __repr__(self) -> str:
        return f"<AuditLog {self.path!r}>"


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
def _process_lock(path: str) -> Iterator[None]:
    """Hold the exclusive ``flock`` of ``path`` (the kernel drops it when its holder dies,
    even by SIGKILL); without ``fcntl`` (Windows) only this process's lock applies."""
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    fd = open_host_file(path, os.O_RDWR | os.O_CREAT, what="the audit log's lock", mode=0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
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
