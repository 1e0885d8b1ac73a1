"""What ``call`` shows while a call runs: the tool's output as it arrives and its progress.

* On a terminal, with the ``cli`` extra (rich): output lines as they arrive, under a
  progress line (spinner, the tool's message, a bar when it gave a total, elapsed time)
  that disappears when the call ends. An unfinished line is held in pieces (nothing is
  rebuilt per event) and printed once it ends, or once :data:`MAX_HELD_CHARS` of it
  wait (it then goes on, on the next line).
* Piped, or without rich: output text on standard output as it arrives, and one plain
  ``… done of total: message`` line on standard error per progress batch.
* ``--json``: nothing, unless ``--events``: one JSON line per event on standard output
  (``{"type": "output", ...}``, ``{"type": "progress", ...}``), before the result line.

Every view hears the call through a :class:`~dsh_tools._pipeline.relay.Relay` (so after the
scope's progress filters, a few batches a second, none after the result); text for a
person passes :func:`~dsh_tools._safetext.safe_text`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TextIO

import attrs

from .._pipeline.relay import Relay
from .._safetext import safe_text
from ..progress import Output, Progress
from ._console import json_text

MAX_HELD_CHARS = 16 * 1024
"""The most characters of an unfinished output line the terminal view holds."""

if TYPE_CHECKING:
    from .._models import ToolExecutionInput, ToolExecutionResult
    from .._registry import ToolRegistry


class _View(Protocol):
    def start(self) -> None: ...

    async def send(self, events: list[Progress | Output]) -> None: ...

    def stop(self) -> None: ...


async def run_showing_progress(
    registry: ToolRegistry, call: ToolExecutionInput, view: _View | None
) -> ToolExecutionResult:
    """Run ``call``, showing what it streams on ``view`` (``None``: show nothing)."""
    if view is None:
        return await registry.execute(call)
    relay = Relay(view.send)
    view.start()
    try:
        return await relay.run(registry.execute(attrs.evolve(call, on_progress=relay)))
    finally:
        view.stop()


def progress_view(name: str, json_output: bool, events: bool, out: TextIO, err: TextIO) -> Any:
    """The view ``call`` uses, by its options and where its output goes."""
    if json_output:
        return JsonLines(out) if events else None
    if out.isatty():
        try:
            return RichView(out, name)
        except ImportError:
            pass
    return PlainView(out, err)


class JsonLines:
    """``--events``: each event as one JSON line (the text as the filters left it; every
    non-ASCII character escaped when one would act on a terminal, as ``--json`` does)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def start(self) -> None:
        return None

    async def send(self, events: list[Progress | Output]) -> None:
        for event in events:
            self.out.write(json_text(event.to_json(), indent=None))
        self.out.flush()

    def stop(self) -> None:
        return None


class PlainView:
    """Piped: output on ``out`` as it arrives, progress as plain lines on ``err``."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out, self.err = out, err

    def start(self) -> None:
        return None

    async def send(self, events: list[Progress | Output]) -> None:
        for event in events:
            if isinstance(event, Output):
                self.out.write(safe_text(event.text, multiline=True))
                self.out.flush()
            else:
                self.err.write(f"… {safe_text(event.line())}\n")
                self.err.flush()

    def stop(self) -> None:
        return None


class RichView:
    """A terminal: output lines printed above a transient rich progress line."""

    def __init__(self, out: TextIO, name: str) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.progress import (
            Progress as Bar,
        )

        self.console = Console(file=out, highlight=False)
        self.bar = Bar(
            SpinnerColumn(),
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self.task = self.bar.add_task(safe_text(name), total=None)
        self.name = name
        self.held: list[str] = []  # the unfinished line, in the pieces it came in
        self.held_chars = 0

    def start(self) -> None:
        self.bar.start()

    async def send(self, events: list[Progress | Output]) -> None:
        from rich.text import Text

        for event in events:
            if isinstance(event, Output):
                *lines, rest = event.text.split("\n")
                if lines:
                    lines[0] = self._take_held() + lines[0]
                for line in lines:
                    self.console.print(Text(safe_text(line)), soft_wrap=True)
                self.held.append(rest)
                self.held_chars += len(rest)
                if self.held_chars >= MAX_HELD_CHARS:
                    self.console.print(Text(safe_text(self._take_held())), soft_wrap=True)
            else:
                description = safe_text(self.name) + "  " + safe_text(event.line())
                self.bar.update(
                    self.task, description=description, completed=event.done, total=event.total
                )

    def _take_held(self) -> str:
        held = "".join(self.held)
        self.held, self.held_chars = [], 0
        return held

    def stop(self) -> None:
        from rich.text import Text

        if self.held_chars:
            self.console.print(Text(safe_text(self._take_held())), soft_wrap=True)
        self.bar.stop()
