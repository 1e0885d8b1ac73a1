"""The check every duration and budget setting of the plugins makes."""

from __future__ import annotations

import math
from typing import TypeGuard

__all__ = ["positive_finite"]


def positive_finite(value: object) -> TypeGuard[float]:
    """Whether ``value`` is an ``int`` or ``float`` (not a ``bool``) above 0 and finite."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0 < value < math.inf
