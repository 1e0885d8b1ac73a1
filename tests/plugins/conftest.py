"""Fixtures shared by the plugin tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dsh_tools_plugins import _host_programs


@pytest.fixture
def system_directories(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Call with directories to have host programs (bwrap, rg) looked for there instead
    of ``/usr/bin`` and the like; with none, looked up afresh in the real ones. The
    once-per-process lookup is forgotten before and after."""

    def use(*directories: Path) -> None:
        if directories:
            found = tuple(str(directory) for directory in directories)
            monkeypatch.setattr(_host_programs, "SYSTEM_DIRECTORIES", found)
        _host_programs.system_program.cache_clear()

    yield use
    _host_programs.system_program.cache_clear()
