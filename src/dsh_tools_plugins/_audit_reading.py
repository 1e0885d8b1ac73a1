"""Reading an audit log back, and its replay as cards (see :mod:`.audit` for the format:
this module only reads what :class:`~dsh_tools_plugins.audit.AuditLog` writes)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import attrs

from dsh_tools._json import FrozenDict, FrozenList, loads
from dsh_tools._models import PresentableResult, ToolErrorInfo, ToolExecutionInput, ToolFailure
from dsh_tools.errors import DshToolsError, ErrorCode, JsonValueError
from dsh_tools.presentation import (
    GenericResultView,
    ToolCallView,
    ToolResultView,
    present_call,
    present_result,
)

if TYPE_CHECKING:
    from dsh_tools._registry import ToolRegistry, ToolScope
    from dsh_tools.records import DecisionRecord

__all__ = [
    "CALL_EVENT",
    "RESULT_EVENT",
    "AuditEvent",
    "AuditLogError",
    "ReplayedCall",
    "read_audit_log",
    "replay",
]

logger = logging.getLogger("dsh_tools")

CALL_EVENT = "tool/call"
RESULT_EVENT = "tool/result"


class AuditLogError(DshToolsError, ValueError):
    """An audit log line is not a valid event (raised by ``read_audit_log(strict=True)``)."""

    default_code = ErrorCode.INVALID_JSON.value

    def __init__(self, source: str, line: int, problem: str) -> None:
        super().__init__(f"{source}:{line}: {problem}")
        self.source = source
        self.line = line
        self.problem = problem


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
    :func:`dsh_tools.presentation.present_call` / :func:`~dsh_tools.presentation.present_result`
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
