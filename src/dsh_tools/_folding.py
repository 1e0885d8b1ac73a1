"""Arguments as a person reads them before approving a call: every key, none hidden.

A tool without a card of its own is shown by its arguments, and the model picks their
key order and their sizes: a card cut at a fixed length lets a long first argument hide
a short one (``"target": "production"`` after 2,000 characters of ``"notes"``), so the
person approves what they could not see. Here every key at every depth is shown, in
sorted order (never the model's); only a long string or array is *folded*: shortened
to its head, with a marker that says how much was left out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence

__all__ = ["FOLD_CHARS", "FOLD_ITEMS", "fold_text", "folded_arguments"]

FOLD_CHARS = 400
"""How many characters of a string argument are shown before it is folded."""
FOLD_ITEMS = 20
"""How many items of an array are shown before it is folded."""
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")


def fold_text(text: str, limit: int) -> str:
    """``text`` whole when it has at most ``limit`` characters, else its head and a
    marker saying how many characters were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} … ({len(text) - limit:,} more characters not shown)"


def folded_arguments(value: object) -> str:
    """``value`` (JSON data, as a call's arguments) as indented ``key: value`` lines:
    keys sorted, strings as JSON strings (a newline or quote in one cannot start a line
    of its own), long strings and arrays folded."""
    return "\n".join(_lines(value, 0)) + "\n"


def _lines(value: object, depth: int) -> Iterator[str]:
    pad = "  " * depth
    if isinstance(value, Mapping) and value:
        for key in sorted(value):
            shown = key if _PLAIN_KEY.match(key) else json.dumps(key, ensure_ascii=False)
            yield from _entry(f"{pad}{shown}:", value[key], depth)
    elif _is_array(value) and value:
        assert isinstance(value, Sequence)
        for item in value[:FOLD_ITEMS]:
            yield from _entry(f"{pad}-", item, depth)
        if len(value) > FOLD_ITEMS:
            yield f"{pad}… ({len(value) - FOLD_ITEMS:,} more items not shown)"
    else:
        yield pad + _scalar(value)


def _entry(head: str, value: object, depth: int) -> Iterator[str]:
    """One key's or item's lines: on its own line when it is a scalar or empty, else
    its contents indented below it."""
    if (isinstance(value, Mapping) or _is_array(value)) and value:
        yield head
        yield from _lines(value, depth + 1)
    else:
        yield f"{head} {_scalar(value)}"


def _is_array(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str)


def _scalar(value: object) -> str:
    if isinstance(value, str) and len(value) > FOLD_CHARS:
        left_out = len(value) - FOLD_CHARS
        head = json.dumps(value[:FOLD_CHARS], ensure_ascii=False)
        return f"{head} … ({left_out:,} more characters not shown)"
    if isinstance(value, Mapping):
        return "{}"
    if _is_array(value):
        return "[]"
    return json.dumps(value, ensure_ascii=False)
