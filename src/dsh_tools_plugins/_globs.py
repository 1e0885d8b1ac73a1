"""Settings by tool-name glob: an exact name wins, then the first glob that matches."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import TypeVar

T = TypeVar("T")


def by_glob(table: Mapping[str, T], name: str) -> T | None:
    """The setting ``table`` gives tool ``name``: its exact entry, else the first
    ``fnmatch`` glob in the table's order that matches, else ``None``."""
    exact = table.get(name)
    if exact is not None:
        return exact
    for glob, value in table.items():
        if fnmatch.fnmatchcase(name, glob):
            return value
    return None
