"""How a card's fields are checked and frozen, and the :class:`CardError` a bad one raises.

The records of :mod:`dsh_tools.presentation` take these as converters and validators;
the JSON reader (:mod:`dsh_tools.presentation._converter`) reports the same ``_Invalid`` problems,
prefixed with the JSON path of the record it was reading. ``CardError`` is public as
``dsh_tools.presentation.CardError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeAlias

import attrs

from .._content import ContentLike, content_blocks
from .._json import FrozenDict, JsonValue, snapshot
from ..errors import DshToolsError, ErrorCode, JsonValueError

ContentBlocks: TypeAlias = tuple[FrozenDict, ...]
"""Frozen content blocks (``{"type": "text", "text": ...}`` and friends)."""


class CardError(DshToolsError, ValueError):
    """A card is malformed: bad JSON on the way in, or a broken rule on construction.

    The message lists every problem as ``path: problem``, separated by ``; ``.
    """

    default_code = ErrorCode.INVALID_JSON.value


class _Invalid(CardError):
    """One problem at ``where`` (a JSON path suffix such as ``.lineNumber`` or ``[2]``).

    Raised by validators, converters and hooks; the reader prefixes the path of the
    record it was structuring, so the final message names the full JSON path.
    """

    def __init__(self, problem: str, *, where: str = "", label: str = "") -> None:
        super().__init__(f"{label}: {problem}" if label else problem)
        self.problem = problem
        self.where = where


def _wire(name: str) -> str:
    """The camelCase wire key of a snake_case attribute."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


# --- converters and validators used by the records ----------------------------------


def _freeze_json(value: object) -> JsonValue:
    try:
        return snapshot(value, "raw_input")
    except JsonValueError as error:
        where = error.path[len("raw_input") :]
        raise _Invalid(error.problem, where=where, label=error.path) from None


def _freeze_content(value: str | Iterable[ContentLike] | None) -> ContentBlocks | None:
    if value is None:
        return None
    try:
        blocks = content_blocks(value, "content")  # each one a FrozenDict with a "type"
        return tuple(block for block in blocks if isinstance(block, FrozenDict))
    except JsonValueError as error:
        where = error.path[len("content") :]
        raise _Invalid(error.problem, where=where, label=error.path) from None


def _at_least(minimum: int) -> Callable[[Any, attrs.Attribute[Any], int | None], None]:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: int | None) -> None:
        if value is not None and value < minimum:
            raise _Invalid(
                f"must be {minimum} or more, got {value}",
                where=f".{_wire(attribute.name)}",
                label=f"{type(instance).__name__}.{attribute.name}",
            )

    return check


_one_based = _at_least(1)
_count = _at_least(0)


class _Counted(Protocol):
    """A search card: how much it found, and whether it shows less."""

    @property
    def total(self) -> int: ...

    @property
    def truncated(self) -> bool: ...


def _check_total(shown: int, instance: _Counted) -> None:
    """``total`` counts everything found; without truncation it is exactly what is shown."""
    name = type(instance).__name__
    if instance.total < shown or (not instance.truncated and instance.total != shown):
        rule = "at least" if instance.truncated else "exactly"
        raise _Invalid(
            f"must be {rule} the {shown} shown, got {instance.total}",
            where=".total",
            label=f"{name}.total",
        )


def _paths(items: Iterable[str]) -> tuple[str, ...]:
    if isinstance(items, str):  # a str is iterable too, but one path is not a list of them
        raise _Invalid("expected a list of paths, got a string", label="paths")
    return tuple(items)


def _always_emit() -> dict[str, bool]:
    """Field metadata: write this field even while it holds its default."""
    return {"always_emit": True}
