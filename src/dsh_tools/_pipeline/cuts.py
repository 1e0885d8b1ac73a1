"""Where a long unfinished output line may be cut, so no filter sees a secret in pieces.

A line that does not end cannot wait without bound, so past
:data:`~dsh_tools._pipeline.stream.MAX_PARTIAL_CHARS` it is delivered in pieces. A
progress filter (a redaction) sees each piece on its own: a secret across a cut would
reach it as two halves and pass. So a cut is taken only where it changes nothing the
filters do: the head and the rest filtered apart must give exactly what filtering them
joined gives, and the last :data:`HELD_CHARS` characters always wait for more text (a
secret up to that long that crosses the cut lies wholly inside the text checked).
Where no candidate cut passes, the head is withheld: a filter that cannot be cut
fails closed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..progress import Output, Progress

__all__ = ["HELD_CHARS", "safe_cut"]

HELD_CHARS = 4096
"""How many characters of an unfinished line always wait: the longest secret a filter
is sure to see whole however the line was cut."""

Filtered = Callable[[Output], Progress | Output | None]
"""The progress filters folded over one event (``None``: withheld)."""


def safe_cut(line: Output, run: Filtered) -> tuple[int, Progress | Output | None]:
    """Where to cut ``line`` (longer than :data:`HELD_CHARS`) and what the filters make
    of the head before it (``None``: withheld). Raises what ``run`` raises."""
    text = line.text
    whole = run(line)
    for at in _candidates(text):
        head = run(Output(text[:at], line.stream))
        if _joined(head, run(Output(text[at:], line.stream))) == whole:
            return at, head
    return len(text) - HELD_CHARS, None


def _candidates(text: str) -> Iterator[int]:
    """Cuts to try, latest first: after the last blank before the held tail (secrets
    rarely hold one), then the tail's start, then twice further back."""
    last = len(text) - HELD_CHARS
    blank = max(text.rfind(" ", 0, last), text.rfind("\t", 0, last)) + 1
    tried = set()
    for at in (blank, last, last - 256, last - 1024):
        if 0 < at <= last and at not in tried:
            tried.add(at)
            yield at


def _joined(head: object, rest: object) -> object:
    """The two filtered pieces as one event, when they join as text; else a value no
    filtered event equals."""
    if head is None and rest is None:
        return None
    if type(head) is Output and type(rest) is Output and head.stream == rest.stream:
        return Output(head.text + rest.text, head.stream)
    return _APART


_APART = object()
