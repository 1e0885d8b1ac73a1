"""A durable JSON Lines audit log of every tool call and its result, and its replay.

:class:`AuditLog` is a plugin with two hooks:

* a ``tryfirst`` ``dsh_tools_execute`` wrapper that writes a ``tool/call`` event before it
  dispatches to the body, once per call. Wrappers run after pre-execute, approval and the
  guards, so the event is on disk before the body starts whatever other plugins decide
  first, and a wrapper that retries still gives one event per call. A call event that
  cannot be written denies the call (``DENIED``, naming the log): a call is not run
  unrecorded. A dry run (``registry.explain``) runs no wrapper and writes nothing;
* a ``dsh_tools_result`` observer that writes the ``tool/result`` event, with the call's
  decision record (:class:`dsh_tools.records.DecisionRecord`, what each stage decided) as
  ``record``. Calls that never reach the wrapper (denied, arguments that are not JSON, a
  call cancelled or a policy failing before it) get their ``tool/call`` event written
  here, with the result.

Every event is one line of compact JSON (UTF-8), appended whole by
:class:`~dsh_tools_plugins._audit_file.AuditFile` (one ``write`` and ``fsync`` under an
exclusive ``flock``; a torn tail a killed writer left is cut first), so every record lands
whole or not at all and no two records mix, whatever process is killed. When
``execute()`` returns, the result is on disk, so a process killed between calls loses
nothing, and one killed in the middle of a call still has the call's ``tool/call`` event.
Under ``await registry.execute`` the event loop never waits for another writer: an
event whose lock is taken is written by a worker thread while the call awaits it.
Events::

    {"event": "tool/call", "time": "2026-01-02T03:04:05.678901+00:00",
     "call_id": "c1", "root_call_id": "c1", "agent": null, "name": "read_file",
     "arguments": {"path": "a.txt"}}
    {"event": "tool/result", "time": "...", "started": "...", "duration_ms": 1.25,
     "call_id": "c1", "root_call_id": "c1", "agent": null, "name": "read_file",
     "is_error": false, "content": [{"type": "text", "text": "..."}], "error": null,
     "meta": null, "record": {"call_id": "c1", "outcome": "ok", "steps": [...], ...}}

``error`` is ``{"message": ..., "info": {"name": ..., "code": ...}}`` for failures.
``duration_ms`` runs from the ``tool/call`` event (0 for calls that never reached the
body). Times are ISO 8601 in UTC.

No event is ever dropped for its text. ``call_id``, ``root_call_id``, ``agent`` and
``name`` are always written as strings (a host's integer call id ``7`` as ``"7"``), and
text that is not valid Unicode (lone surrogates, as Python decodes file names whose bytes
are not UTF-8) is written with U+FFFD in their place, the project's one rule
(:func:`dsh_tools._json.unicode_text`).

Rotation is by size: before a write would take the file past ``max_bytes``, ``path`` is
renamed to ``path.1`` (``path.1`` to ``path.2`` and so on, the oldest beyond ``backups``
deleted) and a new file is started. Writers open the file only once they hold the lock,
so several processes appending to one file rotate it in turn.

:func:`read_audit_log` reads events back, tolerating a torn line (a process killed in the
middle of a write) and reading the integer call ids that version 0.1.0 wrote as their
strings; :func:`replay` pairs calls with their results and turns them into presentation
cards through :mod:`dsh_tools.presentation`.
"""

from __future__ import annotations

import json
import logging
import os
import time
import weakref
from collections.abc import Awaitable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from dsh_tools import CancelSignal
from dsh_tools._hostfiles import check_host_file
from dsh_tools._json import thaw, unicode_text
from dsh_tools._models import (
    ExecutionToken,
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionResult,
    failure_result,
)
from dsh_tools.errors import ErrorCode
from dsh_tools.hookspecs import WrapperGenerator, hookimpl

from ._audit_file import AuditFile
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


class AuditLog:
    """Appends ``tool/call`` and ``tool/result`` events for every call to ``path``.

    :param path: the log file (created with mode ``0600``, and its missing parent
        directories with ``0700``). It is a host file (:mod:`dsh_tools._hostfiles`): a
        path inside the workspace, through a symbolic link or to anything but a regular
        file raises :class:`~dsh_tools._hostfiles.HostFileError` here, and each event opens
        it again the same way and appends to that descriptor, so a link planted later
        fails the write (and the call) rather than being followed.
    :param max_bytes: rotate before the file would grow past this size.
    :param backups: rotated files to keep (``path.1`` is the newest); ``0`` keeps none.

    Thread-safe, and safe with other instances on the same file in this process (they
    share one lock). The file is opened for each event and closed after its ``fsync``
    (the open costs little next to the ``fsync``), so there is nothing to close and other
    tools may rotate or truncate the file between events.

    What it remembers of a call in flight lives as long as the call's
    :class:`~dsh_tools._models.ToolExecution`: a call whose result is never observed (a
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
        self._file = AuditFile(self.path, max_bytes, backups)
        self._started: dict[ExecutionToken, tuple[str, float]] = {}

    # ------------------------------------------------------------------ hooks

    @hookimpl(wrapper=True, tryfirst=True)
    def dsh_tools_execute(self, execution: ToolExecution) -> WrapperGenerator:
        dispatch = yield
        token = execution.token

        async def recorded(signal: CancelSignal | None = None) -> ToolExecutionResult:
            if token not in self._started:  # once per call, however often a wrapper retries
                time_text, started = _now(), time.perf_counter()
                try:
                    written = self._file.appended(_encode(self._call_event(execution, time_text)))
                    if written is not None:
                        await written
                except Exception as error:
                    return failure_result(
                        f"{self!r} could not record the call, so it did not run: {error}",
                        ErrorCode.DENIED,
                    )
                self._started[token] = (time_text, started)
                weakref.finalize(execution, self._started.pop, token, None)
            result: ToolExecutionResult = await dispatch(signal)
            return result

        return recorded

    @hookimpl
    def dsh_tools_result(
        self, execution: ToolExecution, result: ToolExecutionResult, record: DecisionRecord
    ) -> Awaitable[None] | None:
        finished_text, finished = _now(), time.perf_counter()
        started = self._started.pop(execution.token, None)
        lines = b""
        if started is None:  # it never reached the body: the call event goes with the result
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
        return self._file.appended(lines + _encode(event))

    @staticmethod
    def _call_event(execution: ToolExecution, time_text: str) -> dict[str, Any]:
        arguments = execution.arguments
        return {
            "event": CALL_EVENT,
            "time": time_text,
            **_identity(execution),
            "arguments": None if arguments is None else thaw(arguments),
        }

    def __repr__(self) -> str:
        return f"<AuditLog {self.path!r}>"
