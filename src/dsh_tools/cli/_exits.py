"""How a ``dsh-tools`` command ends: its exit codes, and the errors that pick one.

:mod:`dsh_tools.cli` is the public import path of the exit codes and lists what each means.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._console import EXIT_OUTPUT_CLOSED

if TYPE_CHECKING:
    from .._plugins.loading import LoadReport

__all__ = [
    "EXIT_CALL_FAILED",
    "EXIT_INTERNAL",
    "EXIT_OK",
    "EXIT_OUTPUT_CLOSED",
    "EXIT_PLUGINS",
    "EXIT_USAGE",
    "EXIT_WOULD_ASK",
    "PluginsFailed",
    "Refused",
    "UsageError",
    "needs_mcp_extra",
]

EXIT_OK = 0
EXIT_CALL_FAILED = 1
EXIT_USAGE = 2
EXIT_PLUGINS = 3
EXIT_INTERNAL = 4
EXIT_WOULD_ASK = 10
"""``explain``: the call would ask for approval (neither a denial nor a clear run)."""


class UsageError(Exception):
    """Bad input from the person at the terminal; printed as one line, exit code 2.

    ``code`` is what ``--json`` reports (``USAGE``, or ``STORE_ERROR`` for an approval
    store that cannot be used)."""

    def __init__(self, message: str, *, code: str = "USAGE") -> None:
        super().__init__(message)
        self.code = code


def needs_mcp_extra(what: str, error: ImportError) -> UsageError:
    """The error of a command that needs the ``mcp`` extra, with the install line every
    install hint gives."""
    return UsageError(
        f"{what} needs the mcp extra: install dsh-tools with it (in a clone: "
        f"pip install '.[mcp]') ({error})"
    )


class Refused(Exception):
    """The command was understood, but what it asked cannot be done (an unknown ticket,
    an answer that came too late): one line, exit code 1, and ``code`` under ``--json``."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class PluginsFailed(Exception):
    """Plugins failed to load where that matters: exit code 3."""

    def __init__(self, message: str, report: LoadReport | None = None) -> None:
        super().__init__(message)
        self.report = report
