"""What a tool says about itself, for permission rules: ``read_only``, ``destructive``,
``idempotent`` and ``open_world``.

A tool's own metadata flags are trusted (the host registered it). An imported MCP tool's
annotations are a remote server's claims (see :mod:`dsh_tools.bridges._mcp_hints`):
trusted when the rules file names the server in ``trusted_mcp_servers``, and otherwise
able only to make a decision stricter: they can make an ``ask`` or ``deny`` rule match,
never an ``allow`` rule. A flag nobody states counts as ``false``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from dsh_tools._models import ToolDefinition
from dsh_tools.bridges._mcp_hints import FLAGS, HINTS_KEY, SERVER_KEY

Wanted = tuple[tuple[str, bool], ...]


class ToolHints(NamedTuple):
    """A tool's flags: those to believe, and an untrusted server's claims."""

    trusted: Mapping[str, bool]
    claimed: Mapping[str, bool]


NO_HINTS = ToolHints({}, {})


def _flags(given: Mapping[str, Any]) -> dict[str, bool]:
    return {flag: given[flag] for flag in FLAGS if type(given.get(flag)) is bool}


def tool_hints(tool: ToolDefinition[Any] | None, trusted_servers: Iterable[str]) -> ToolHints:
    """The flags of ``tool``; an imported tool's hints are trusted only when it came from
    one of ``trusted_servers``."""
    if tool is None:
        return NO_HINTS
    metadata = tool.metadata
    own = _flags(metadata)
    imported = metadata.get(HINTS_KEY)
    if not isinstance(imported, Mapping):
        return ToolHints(own, {})
    claims = _flags(imported)
    if metadata.get(SERVER_KEY) in set(trusted_servers):
        return ToolHints({**claims, **own}, {})
    return ToolHints(own, claims)


def hints_match(wanted: Wanted, hints: ToolHints, strict: bool) -> bool:
    """Whether a rule asking for ``wanted`` flags matches; a ``strict`` rule (ask or
    deny) may also match on the claims of an untrusted server."""
    trusted = hints.trusted
    if all(trusted.get(flag, False) is value for flag, value in wanted):
        return True
    if not strict or not hints.claimed:
        return False
    seen = {**hints.claimed, **trusted}
    return all(seen.get(flag, False) is value for flag, value in wanted)
