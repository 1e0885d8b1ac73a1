"""Render presentation cards as plain terminal text (the CLI's view of a call).

Plain text works everywhere (pipes, CI logs, dumb terminals); every card type has a
rendering, and a missing result card falls back to the result's own content.

Cards show text from the model and the workspace, so every card passes
:func:`~dsh_tools._safetext.safe_text`: a field shown on one line (a title, a command, a
path, a matched line) has its newlines escaped too, so it cannot forge a line of the
card, and the whole card is made inert before it is written.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import TextIO

from .._content import content_text
from .._folding import fold_text, folded_arguments
from .._models import PresentableResult, ToolExecutionFailure, ToolExecutionResult
from .._safetext import safe_text
from ._cards import (
    DiffCallView,
    DiffResultView,
    FileDiff,
    GenericCallView,
    GenericResultView,
    ReadResultView,
    SearchMatchesView,
    SearchPathsView,
    TerminalCallView,
    TerminalResultView,
    ToolCallView,
    ToolResultView,
    WebFetchView,
    WebSearchView,
    command_reach,
)

__all__ = ["emit_card", "render_call_view", "render_result"]

_MAX_INPUT = 2000
_LINE = re.compile(r"[^\n]*\n|[^\n]+\Z")
"""A line of a file, its newline included: only a newline ends one (a carriage return is
shown as an escape, not taken for a line break)."""


def _lines(text: str, indent: str = "  ") -> str:
    """``text`` made safe, each of its lines indented (only newlines end a line)."""
    return "".join(f"{indent}{line}\n" for line in safe_text(text, multiline=True).splitlines())


def _diff_text(diffs: Iterable[FileDiff]) -> str:
    parts = []
    for diff in diffs:
        before = _LINE.findall(diff.old_text or "")
        after = _LINE.findall(diff.new_text)
        path = safe_text(diff.path)
        label_from = "/dev/null" if diff.old_text is None else f"a/{path}"
        unified = difflib.unified_diff(before, after, label_from, f"b/{path}")
        parts.append("".join(line if line.endswith("\n") else line + "\n" for line in unified))
    return _lines("".join(parts))


def render_call_view(view: ToolCallView) -> str:
    """The pending card of a call, ending with a newline, safe to write to a terminal."""
    return safe_text(_call_card(view), multiline=True)


def _call_card(view: ToolCallView) -> str:
    title = safe_text(view.title)
    if isinstance(view, TerminalCallView):
        head = f"$ {title}"
        if view.cwd:
            head += f"   (in {safe_text(view.cwd)})"
        description = f"  {safe_text(view.description)}\n" if view.description else ""
        reach = command_reach(view)
        return f"{head}\n{description}" + (f"  [{reach}]\n" if reach else "")
    if isinstance(view, DiffCallView):
        return f"✎ {title}\n{_diff_text(view.diffs)}"
    assert isinstance(view, GenericCallView)
    kind = f" [{view.kind.value}]" if view.kind is not None else ""
    text = f"▶ {title}{kind}\n"
    if view.raw_input is not None:
        raw = view.raw_input
        text += _lines(
            fold_text(raw, _MAX_INPUT) if isinstance(raw, str) else folded_arguments(raw)
        )
    for location in view.locations:
        line = f":{location.line}" if location.line else ""
        text += f"  @ {safe_text(location.path)}{line}\n"
    return text


def _status(
    result: ToolExecutionResult | PresentableResult, view: ToolResultView | None = None
) -> str:
    if isinstance(view, TerminalResultView) and not result.is_error:
        # The call succeeded; the command it ran may not have.
        if view.signal:
            return f"✗ killed by {safe_text(view.signal)}"
        if view.exit_code not in (None, 0):
            return f"✗ exit {view.exit_code}"
    if not result.is_error:
        return "✓ done"
    if isinstance(result, ToolExecutionFailure):
        return f"✗ failed ({result.error.info.code})"
    return "✗ failed"


def render_result(
    view: ToolResultView | None, result: ToolExecutionResult | PresentableResult
) -> str:
    """The completed card of a call (or its raw content without one), with its status,
    safe to write to a terminal."""
    return safe_text(_result_card(view, result), multiline=True)


def _result_card(
    view: ToolResultView | None, result: ToolExecutionResult | PresentableResult
) -> str:
    status = _status(result, view)
    text = content_text(result.content)
    shown_title = getattr(view, "title", None) if view is not None else None
    title = f"{status}: {safe_text(shown_title)}" if shown_title else status
    if view is None or result.is_error:
        return f"{title}\n{_lines(text)}"
    if isinstance(view, TerminalResultView):
        ending = (
            f"exit {view.exit_code}"
            if view.exit_code is not None
            else (f"killed by {view.signal}" if view.signal else None)
        )
        notes = "; ".join(note for note in (ending, command_reach(view)) if note)
        return f"{title}\n{_lines(view.output or '')}" + (f"  [{notes}]\n" if notes else "")
    if isinstance(view, DiffResultView):
        return f"{title}\n{_diff_text(view.diffs)}"
    if isinstance(view, SearchMatchesView):
        body = "".join(
            f"  {safe_text(group.path)}:{match.line_number}: {safe_text(match.line)}\n"
            for group in view.files
            for match in group.matches
        )
        return f"{title}\n{body}{_truncation(view.truncated, view.total)}"
    if isinstance(view, SearchPathsView):
        body = "".join(f"  {safe_text(path)}\n" for path in view.paths)
        return f"{title}\n{body}{_truncation(view.truncated, view.total)}"
    if isinstance(view, ReadResultView):
        body = "".join(f"  {line.number:>6}  {safe_text(line.text)}\n" for line in view.lines)
        shown = f"  ({safe_text(view.path)}: {len(view.lines)} of {view.total_lines} lines)\n"
        return f"{title}\n{body}{shown}"
    if isinstance(view, WebSearchView):
        body = "".join(
            f"  - {safe_text(source.title or source.url)}  {safe_text(source.url)}\n"
            for source in view.sources
        )
        answer = _lines(view.answer) if view.answer else ""
        return f"{title}\n{answer}{body}"
    if isinstance(view, WebFetchView):
        return f"{title}\n  {safe_text(view.url)} [{view.status_code}]\n{_lines(text)}"
    assert isinstance(view, GenericResultView)
    shown = content_text(view.content) if view.content is not None else text
    return f"{title}\n{_lines(shown)}"


def emit_card(text: str, out: TextIO) -> None:
    """Write a rendered card: framed and coloured by ``rich`` on a terminal when the
    ``cli`` extra is installed, plain text everywhere else (pipes, logs, CI)."""
    try:
        if not out.isatty():
            raise ImportError("not a terminal")
        from rich.console import Console
        from rich.panel import Panel
        from rich.text import Text
    except ImportError:
        out.write(text)
        return
    head, _, body = text.partition("\n")
    style = "red" if head.startswith("✗") else "green" if head.startswith("✓") else "cyan"
    if not body.strip():
        Console(file=out, highlight=False).print(Text(head, style=f"bold {style}"))
        return
    panel = Panel(
        Text(body.rstrip("\n")),
        title=Text(head, style=f"bold {style}"),
        title_align="left",
        border_style=style,
    )
    Console(file=out, highlight=False).print(panel)


def _truncation(truncated: bool, total: int) -> str:
    return f"  (truncated: {total} in all)\n" if truncated else ""
