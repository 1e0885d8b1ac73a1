"""The check every duration, timeout and lifetime setting of the library makes."""

from __future__ import annotations

import math
from typing import TypeGuard

__all__ = ["positive_finite"]


def positive_finite(value: object) -> TypeGuard[float]:
    """Whether ``value`` is exactly an ``int`` or a ``float`` (a ``bool`` is not a
    number) above 0 and finite."""
    return type(value) in (int, float) and 0 < value < math.inf  # type: ignore[operator]
