"""What a rule's predicates read from one call: whether a path lies inside a prefix,
the argv a command runs, the text of a command, JSON equality of arguments, and where a
declared path argument reaches. :class:`~dsh_tools_plugins._rules.rule.Rule` matches with
these; the public face is :mod:`dsh_tools_plugins.permissions`."""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Mapping
from typing import Any

from dsh_tools._models import ToolDefinition

from .._reach import CallReach, Reach, inside
from .._shell import simple_argv

__all__ = [
    "Command",
    "Prefix",
    "call_argv",
    "call_reach",
    "command_text",
    "json_equal",
    "normalise",
    "touches",
    "within",
]

Prefix = tuple[bool, tuple[str, ...]]
"""A normalised path prefix: (is absolute, components)."""


def normalise(path: str) -> Prefix:
    """(is absolute, components) of a normalised path; ``.`` has no components."""
    normal = os.path.normcase(os.path.normpath(path))
    absolute = os.path.isabs(normal)
    parts = tuple(part for part in re.split(r"[\\/]+" if os.sep == "\\" else "/+", normal) if part)
    if parts == (".",):
        parts = ()
    return absolute, parts


def within(path: str, prefix: Prefix) -> bool:
    """Whether ``path``, normalised, lies inside ``prefix`` by whole components."""
    absolute, parts = normalise(path)
    prefix_absolute, prefix_parts = prefix
    if absolute != prefix_absolute or parts[: len(prefix_parts)] != prefix_parts:
        return False
    rest = parts[len(prefix_parts) :]
    return not rest or rest[0] != ".."


def json_equal(left: object, right: object) -> bool:
    """JSON equality: ``True`` is not ``1``, ``1`` equals ``1.0``, ``"1"`` is not ``1``."""
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(json_equal(left[k], right[k]) for k in left)
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        return len(left) == len(right) and all(map(json_equal, left, right))
    numbers = (int, float)
    if (
        isinstance(left, numbers)
        and isinstance(right, numbers)
        and not isinstance(left, bool)
        and not isinstance(right, bool)
    ):
        return left == right
    return type(left) is type(right) and left == right


def touches(place: Reach, prefix: str) -> bool:
    """Whether ``place`` is inside ``prefix``, or reaches into it from above."""
    return any(
        inside(spelling, prefix) or (place.below and inside(prefix, spelling))
        for spelling in place.spellings
    )


def call_reach(
    tool: ToolDefinition[Any] | None, arguments: Mapping[str, object] | None
) -> CallReach | None:
    """The places a call of ``tool`` reaches, when the tool declares its paths."""
    if tool is None or tool.paths is None:
        return None
    return CallReach(tool.paths, tool.parameters, arguments or {})


class Command(enum.Enum):
    """What a call runs when it has no plain argv."""

    ABSENT = "no command or argv argument"
    OPAQUE = "a command that is not one simple command"


def call_argv(args: Mapping[str, object]) -> tuple[str, ...] | Command:
    """The argv a call runs: its ``argv`` list, or its ``command`` string when that is one
    simple command (see :mod:`dsh_tools_plugins._shell`)."""
    command, argv = args.get("command"), args.get("argv")
    if command is None and argv is None:
        return Command.ABSENT
    if command is None:
        if isinstance(argv, (list, tuple)) and argv and all(isinstance(w, str) for w in argv):
            return tuple(argv)
        return Command.OPAQUE
    if argv is None and isinstance(command, str):
        return simple_argv(command) or Command.OPAQUE
    return Command.OPAQUE


def command_text(args: Mapping[str, object]) -> str | None:
    for key in ("command", "argv"):
        value = args.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
            return " ".join(str(item) for item in value)
    return None
