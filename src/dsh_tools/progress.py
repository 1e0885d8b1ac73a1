"""What a running tool says before it returns: progress and output events.

A tool body reports through its :class:`~dsh_tools.ToolRunContext`
(``ctx.report_progress(done, total, message)`` and ``ctx.emit_output(text, stream)``); the
pipeline turns each report into one of the two events below, coalesces them, passes each
batch through the scope's ``dsh_tools_progress_filter`` implementations (so a redaction
policy sees the stream as it sees the final content) and hands what is left to the
``dsh_tools_progress`` listeners and to the call's own listener (``on_progress=`` of
``registry.execute``), which is how the MCP, ACP and command-line bridges stream.

With nobody listening a report costs one attribute check: the plan decides once whether
a scope's calls have listeners.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import attrs

if TYPE_CHECKING:
    from ._models import ToolExecution

__all__ = [
    "DROP",
    "Output",
    "Progress",
    "ProgressEvent",
    "ProgressListener",
    "StreamSummary",
]


def _number(label: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError(f"report_progress() {label} must be a finite number, got {value!r}")


@attrs.frozen
class Progress:
    """How far the call has come: ``done`` of ``total`` (``None``: unknown), with an
    optional ``message`` for a person ("3 of 10 files", "compiling")."""

    done: float
    total: float | None = None
    message: str | None = None

    def __attrs_post_init__(self) -> None:
        done, total, message = self.done, self.total, self.message
        _number("done", done)
        if total is not None:
            _number("total", total)
        if message is not None and not isinstance(message, str):
            raise TypeError(f"report_progress() message must be a str, got {message!r}")

    def line(self) -> str:
        """``3 of 10: message`` (``3: message`` without a total), as the bridges show it;
        the message as the tool wrote it (make it safe before showing it)."""
        done = f"{self.done:g}" if self.total is None else f"{self.done:g} of {self.total:g}"
        return done if self.message is None else f"{done}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        """``{"type": "progress", "done": ..., "total": ..., "message": ...}``."""
        return {"type": "progress", "done": self.done, "total": self.total, "message": self.message}


@attrs.frozen
class Output:
    """Text the call produced, as it was produced, on a named ``stream`` (``"stdout"``,
    ``"stderr"``, or any name a tool chooses)."""

    text: str
    stream: str = "stdout"

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TypeError(f"emit_output() text must be a str, got {type(self.text).__name__}")
        if not isinstance(self.stream, str) or not self.stream:
            raise TypeError(f"emit_output() stream must be a non-empty str, got {self.stream!r}")

    def to_json(self) -> dict[str, Any]:
        """``{"type": "output", "stream": ..., "text": ...}``."""
        return {"type": "output", "stream": self.stream, "text": self.text}


ProgressEvent: TypeAlias = "Progress | Output"
"""One event a running call reports."""

ProgressListener = Callable[["ToolExecution", "Progress | Output"], None]
"""A call's own listener (``registry.execute(call, on_progress=listener)``): called with
the execution and each event that passed the filters, in order, one at a time, from
whichever thread delivered the batch (the body's, or a timer's); never after the result."""


class _Drop:
    def __repr__(self) -> str:
        return "DROP"


DROP: Final = _Drop()
"""What a ``dsh_tools_progress_filter`` returns to withhold an event."""


@attrs.frozen
class StreamSummary:
    """What a call streamed, as its decision record and the audit log keep it: counts,
    the last progress, not every event."""

    progress: int = 0
    """Progress reports the body made."""
    output: int = 0
    """Output reports the body made."""
    output_chars: int = 0
    """Characters of output the body reported."""
    delivered: int = 0
    """Events delivered to listeners after coalescing and filtering."""
    withheld: int = 0
    """Events a filter withheld (or that a failing filter took down with it)."""
    last: Progress | None = None
    """The last progress that reached the listeners."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = attrs.asdict(self, recurse=False)
        data["last"] = None if self.last is None else self.last.to_json()
        return data
