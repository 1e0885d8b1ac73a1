"""Bound the text a model sees from one call, keeping the full text for the host.

:class:`OutputLimit` is a ``trylast`` ``dsh_tools_post_execute`` plugin, so it bounds the
content every other post-execute policy left. When the text blocks of a result hold more
than ``max_chars`` characters or ``max_bytes`` UTF-8 bytes (together; images and other
non-text blocks pass through and do not count), it keeps text blocks in order up to the
limit, cuts the block that crosses it (never inside a UTF-8 sequence), drops later text
blocks and appends one text block::

    [output truncated: showed 2000 of 51234 characters; the full text is available to the host]

(``bytes`` instead of ``characters`` when the byte limit was the tighter one). The marker
itself is not counted against the limit. The replacement is an
``Accept(content=..., bounded=True)``: a bound is not a redaction, so the result keeps its
``value`` and ``meta`` for the host (cards keep their structure), a success stays a
success on every wire (over MCP a structured tool's ``structuredContent`` still carries
the value), and a failure stays a failure with the same code. Redact before the limit:
it runs last (``trylast``), and content it already cut is what later policies see.

The original content of each truncated call is kept for the host: ``full_content(call_id)``
returns it for the ``keep_full`` most recently truncated calls (least recently used
first out). A tool's own ``finalize_content`` runs after post-execute and is not bounded.

Streamed output (``ctx.emit_output``) is bounded too: as a ``dsh_tools_progress_filter``,
each delivered output event is cut to the same limits, with the same marker.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from dsh_tools._json import FrozenList
from dsh_tools._models import Accept, ToolExecution, ToolExecutionResult
from dsh_tools.hookspecs import hookimpl
from dsh_tools.progress import Output, Progress

__all__ = ["OutputLimit"]


def _limit(label: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"OutputLimit {label} must be an integer >= 0 or None, got {value!r}")
    return value


def _text_of(block: object) -> str | None:
    """The text of a text block, ``None`` for any other block."""
    if isinstance(block, dict) and block.get("type") == "text":
        return str(block.get("text", ""))
    return None


class OutputLimit:
    """Truncates model-facing text content per call to ``max_chars`` and/or ``max_bytes``.

    :param max_chars: most characters of text shown to the model (``None``: no limit).
    :param max_bytes: most UTF-8 bytes of text shown to the model (``None``: no limit).
    :param keep_full: how many truncated calls' full content to keep for
        :meth:`full_content` (``0`` keeps none).
    """

    def __init__(
        self, max_chars: int | None = None, max_bytes: int | None = None, keep_full: int = 100
    ) -> None:
        self.max_chars = _limit("max_chars", max_chars)
        self.max_bytes = _limit("max_bytes", max_bytes)
        keep = _limit("keep_full", keep_full)
        self.keep_full = 0 if keep is None else keep
        self._full: OrderedDict[str, FrozenList] = OrderedDict()
        self._lock = threading.Lock()

    def full_content(self, call_id: str) -> FrozenList | None:
        """The untruncated content of call ``call_id``, if it was truncated recently."""
        with self._lock:
            content = self._full.get(call_id)
            if content is not None:
                self._full.move_to_end(call_id)
            return content

    def truncate(self, content: FrozenList) -> FrozenList | None:
        """The bounded content with its marker, or ``None`` when it is within the limits."""
        texts = [text for text in map(_text_of, content) if text is not None]
        total_chars = sum(map(len, texts))
        total_bytes = sum(len(text.encode("utf-8")) for text in texts)
        chars_over = self.max_chars is not None and total_chars > self.max_chars
        bytes_over = self.max_bytes is not None and total_bytes > self.max_bytes
        if not (chars_over or bytes_over):
            return None
        chars_left = total_chars if self.max_chars is None else self.max_chars
        bytes_left = total_bytes if self.max_bytes is None else self.max_bytes
        shown_chars = shown_bytes = 0
        by_bytes = False
        blocks: list[Any] = []
        for block in content:
            text = _text_of(block)
            if text is None or not isinstance(block, dict):
                blocks.append(block)
                continue
            cut = text[:chars_left]
            encoded = cut.encode("utf-8")
            if len(encoded) > bytes_left:
                cut = encoded[:bytes_left].decode("utf-8", errors="ignore")
                encoded = cut.encode("utf-8")
                by_bytes = True
            if cut:
                blocks.append({**block, "text": cut})
            chars_left -= len(cut)
            bytes_left -= len(encoded)
            shown_chars += len(cut)
            shown_bytes += len(encoded)
        if by_bytes or not chars_over:
            shown, total, unit = shown_bytes, total_bytes, "bytes"
        else:
            shown, total, unit = shown_chars, total_chars, "characters"
        blocks.append(
            {
                "type": "text",
                "text": f"[output truncated: showed {shown} of {total} {unit}; "
                "the full text is available to the host]",
            }
        )
        return FrozenList(blocks)

    @hookimpl(trylast=True)
    def dsh_tools_post_execute(
        self, execution: ToolExecution, result: ToolExecutionResult
    ) -> Accept | None:
        bounded = self.truncate(result.content)
        if bounded is None:
            return None
        if self.keep_full:
            with self._lock:
                self._full[execution.call_id] = result.content
                self._full.move_to_end(execution.call_id)
                while len(self._full) > self.keep_full:
                    self._full.popitem(last=False)
        return Accept(content=bounded, bounded=True)

    @hookimpl(trylast=True)
    def dsh_tools_progress_filter(self, event: Progress | Output) -> Output | None:
        if not isinstance(event, Output):
            return None
        bounded = self.truncate(FrozenList([{"type": "text", "text": event.text}]))
        if bounded is None:
            return None
        return Output("\n".join(filter(None, map(_text_of, bounded))), event.stream)

    def __repr__(self) -> str:
        return f"<OutputLimit max_chars={self.max_chars!r} max_bytes={self.max_bytes!r}>"
