"""A record field that takes any iterable and keeps a tuple, each member checked: the
one loop behind ``additional_contexts`` and ``ToolPaths.arguments``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

__all__ = ["tuple_of"]

T = TypeVar("T")


def tuple_of(
    kind: type[T], value: Iterable[object], label: str, error: type[Exception]
) -> tuple[T, ...]:
    """``value`` as a tuple of ``kind``; ``error`` names the index of a member that is not
    one (``label[2] must be a ...``)."""
    members = tuple(value)
    for index, member in enumerate(members):
        if not isinstance(member, kind):
            raise error(
                f"{label}[{index}] must be a {kind.__name__}, got {type(member).__qualname__}"
            )
    return members  # type: ignore[return-value]  # each member was checked above
