"""What every wire converter shares: the JSON alias, :class:`WireFormatError`, and the
lookup of a ``format`` name. :mod:`dsh_tools.bridges.wire` is the public import path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ..errors import DshToolsError, ErrorCode

F = TypeVar("F", bound=Callable[..., Any])

Json = dict[str, Any]
"""A plain, mutable JSON object as the wire converters return it."""


class WireFormatError(DshToolsError, ValueError):
    """A provider payload (or format name) this module cannot use.

    ``provider`` says whose shape was expected, ``path`` where in the payload the problem
    is (``tool_calls[0].function.arguments``) and ``problem`` what is wrong with it.
    """

    default_code = ErrorCode.INVALID_JSON.value

    def __init__(self, provider: str, path: str, problem: str) -> None:
        super().__init__(f'{provider}: "{path}" {problem}')
        self.provider = provider
        self.path = path
        self.problem = problem


def dispatch(table: Mapping[str, F], caller: str, format: str) -> F:
    try:
        return table[format]
    except (KeyError, TypeError):
        known = ", ".join(table)
        raise WireFormatError(caller, "format", f"must be one of {known}; got {format!r}") from None
