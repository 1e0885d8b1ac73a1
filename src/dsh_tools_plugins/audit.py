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
from typing import TYPE_CHECKING, Any, NamedTuple

import attrs

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from dsh_tools.errors import DshToolsError, ErrorCode, JsonValueError
from dsh_tools.hookspecs import hookimpl
from dsh_tools.hostfiles import check_host_file, open_host_file
from dsh_tools.json import FrozenDict, FrozenList, loads, thaw, unicode_text
from dsh_tools.models import (
    ExecutionToken,
    PresentableResult,
    ToolErrorInfo,
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolFailure,
)
from dsh_tools.presentation import GenericResultView, ToolCallView, ToolResultView
from dsh_tools.presenting import present_call, present_result

if TYPE_CHECKING:
    from dsh_tools.records import DecisionRecord
    from dsh_tools.registry import ToolRegistry, ToolScope

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

CALL_EVENT = "tool/call"
RESULT_EVENT = "tool/result"
_MiB = 1024 * 1024


class AuditLogError(DshToolsError, ValueError):
    """An audit log line is not a valid event (raised by ``read_audit_log(strict=True)``)."""

    default_code = ErrorCode.INVALID_JSON.value

    def __init__(self, source: str, line: int, problem: str) -> None:
        super().__init__(f"{source}:{line}: {problem}")
        self.source = source
        self.line = line
        self.problem = problem


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


# --------------------------------------------------------------------------- reading


@attrs.frozen
class AuditEvent:
    """One event read back: its kind (``tool/call`` or ``tool/result``), its call id, the
    whole record as frozen JSON, and where it was (file and 1-based line)."""

    event: str
    call_id: str
    data: FrozenDict
    source: str
    line: int


def _files(path: str, rotated: bool) -> list[str]:
    if not rotated:
        return [path]
    backups = []
    index = 1
    while os.path.exists(f"{path}.{index}"):
        backups.append(f"{path}.{index}")
        index += 1
    return [*reversed(backups), path]


def read_audit_log(
    path: str | os.PathLike[str], *, rotated: bool = False, strict: bool = False
) -> Iterator[AuditEvent]:
    """The events of an audit log, in file order.

    :param rotated: also read the rotated files, oldest first (``path.N`` … ``path.1``,
        then ``path``).
    :param strict: raise :class:`AuditLogError` for a bad line instead of skipping it.

    A line that is not a complete event (a process killed in the middle of a write leaves
    a torn last line; a later run starts on a fresh line after it) is skipped and reported
    as a warning on the ``dsh_tools`` logger, with the file and line number. A missing
    ``path`` raises :class:`FileNotFoundError`.
    """
    for source in _files(os.fspath(path), rotated):
        with open(source, "rb") as handle:
            for number, raw in enumerate(handle, 1):
                if not raw.strip():
                    continue
                try:
                    event = _parse_event(raw)
                except (JsonValueError, UnicodeDecodeError, ValueError) as error:
                    if not raw.endswith(b"\n"):
                        problem = f"a torn last line ({len(raw)} bytes, no newline): {error}"
                    else:
                        problem = (
                            "a line that is not an event (a torn write from an earlier "
                            f"crash, or corruption): {error}"
                        )
                    if strict:
                        raise AuditLogError(source, number, problem) from None
                    logger.warning("audit log %s:%d: skipped %s", source, number, problem)
                    continue
                yield AuditEvent(event["event"], _call_id(event), event, source, number)


def _parse_event(raw: bytes) -> Any:
    event = loads(raw.decode("utf-8"), "event")
    if not isinstance(event, FrozenDict):
        raise ValueError("an event must be a JSON object")
    if event.get("event") not in (CALL_EVENT, RESULT_EVENT):
        raise ValueError(f"unknown event kind {event.get('event')!r}")
    call_id = event.get("call_id")
    integer = isinstance(call_id, int) and not isinstance(call_id, bool)
    if not ((isinstance(call_id, str) and call_id) or integer) or not isinstance(
        event.get("name"), str
    ):
        raise ValueError("an event needs a non-empty string call_id and a string name")
    return event


def _call_id(event: FrozenDict) -> str:
    """The event's call id as a string: version 0.1.0 wrote a host's integer id as is."""
    return str(event["call_id"])


# --------------------------------------------------------------------------- replay


class ReplayedCall(NamedTuple):
    """One call read back from an audit log, with its cards.

    ``result`` and ``result_card`` are ``None`` when the log has no result for the call
    (the process ended while it ran). ``error`` is the failure's message and code, for
    failed calls. ``record`` is the call's decision record, when the log has one (logs
    written by version 0.1.0 do not).
    """

    call: ToolExecutionInput
    result: PresentableResult | None
    call_card: ToolCallView
    result_card: ToolResultView | None
    error: ToolFailure | None
    record: DecisionRecord | None = None


def replay(
    path: str | os.PathLike[str],
    view: ToolRegistry | ToolScope,
    *,
    rotated: bool = False,
) -> Iterator[ReplayedCall]:
    """Pair each ``tool/call`` with its ``tool/result`` and present both as cards.

    Calls come in the order they were made; each is yielded when its result is read (or
    at the end, without a result, when it has none). Cards come from
    :func:`dsh_tools.presenting.present_call` / :func:`~dsh_tools.presenting.present_result`
    against ``view`` (the tools registered now), falling back to the generic cards; a
    result with no presenter gets ``GenericResultView()`` (show the raw content). Never
    raises for a bad event: the reader's tolerance applies.
    """
    pending: dict[tuple[str | None, str], ToolExecutionInput] = {}
    for event in read_audit_log(path, rotated=rotated):
        data = event.data
        agent = data.get("agent")
        key = (agent if isinstance(agent, str) else None, event.call_id)
        if event.event == CALL_EVENT:
            pending[key] = _call_input(data)
            continue
        call = pending.pop(key, None) or _call_input(data)
        content = data.get("content")
        result = PresentableResult(
            content=content if isinstance(content, FrozenList) else [],
            is_error=data.get("is_error") is True,
            meta=data.get("meta"),
        )
        yield ReplayedCall(
            call=call,
            result=result,
            call_card=present_call(view, call),
            result_card=present_result(view, call, result) or GenericResultView(),
            error=_failure(data.get("error")),
            record=_record(data.get("record")),
        )
    for call in pending.values():
        yield ReplayedCall(call, None, present_call(view, call), None, None)


def _call_input(data: FrozenDict) -> ToolExecutionInput:
    agent = data.get("agent")
    root = data.get("root_call_id")
    arguments = data.get("arguments")
    return ToolExecutionInput(
        call_id=_call_id(data),
        name=str(data["name"]),
        arguments=arguments,
        agent=agent if isinstance(agent, str) else None,
        root_call_id=root if isinstance(root, str) else None,
    )


def _record(data: object) -> DecisionRecord | None:
    """The decision record an event holds; ``None`` when it has none or it is damaged."""
    from dsh_tools.records import DecisionRecord

    if not isinstance(data, dict):
        return None
    try:
        return DecisionRecord.from_json(data)
    except (KeyError, TypeError, ValueError):
        return None


def _failure(error: object) -> ToolFailure | None:
    if not isinstance(error, dict):
        return None
    info = error.get("info")
    info = info if isinstance(info, dict) else {}
    return ToolFailure(
        str(error.get("message", "")),
        ToolErrorInfo(str(info.get("name", "ToolError")), str(info.get("code", ""))),
    )
