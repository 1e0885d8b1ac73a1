"""MCP tool annotations and tool metadata, both ways (no MCP import).

Serving, a tool's own ``metadata`` flags become MCP ``ToolAnnotations``
(:func:`annotations_of`). Importing, a remote tool's annotations are *claims* of a server
the host may not trust: they go into the definition's metadata under :data:`HINTS_KEY`
(with the server's name, as the host gave it, under :data:`SERVER_KEY`), never into
``read_only`` or ``idempotent`` themselves, which local plugins (``ResultCache``,
``RetryPolicy``) act on (:func:`imported_metadata`). Permission rules read both and let
an untrusted server's claims only make a decision stricter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FLAGS: dict[str, str] = {
    "read_only": "readOnlyHint",
    "destructive": "destructiveHint",
    "idempotent": "idempotentHint",
    "open_world": "openWorldHint",
}
"""Metadata flag -> MCP annotation field."""

HINTS_KEY = "mcp_hints"
"""Metadata key of an imported tool's annotations, as flags (``{"destructive": True}``)."""

SERVER_KEY = "mcp_server"
"""Metadata key of the name the host gave the server an imported tool came from."""


def annotations_of(metadata: Mapping[str, Any]) -> dict[str, Any] | None:
    """The MCP annotations a tool's own metadata says (``None``: none): its boolean
    flags, and ``title`` when it is a string."""
    annotations: dict[str, Any] = {
        hint: metadata[flag] for flag, hint in FLAGS.items() if type(metadata.get(flag)) is bool
    }
    title = metadata.get("title")
    if isinstance(title, str):
        annotations["title"] = title
    return annotations or None


def imported_metadata(annotations: Mapping[str, Any] | None, server: str | None) -> dict[str, Any]:
    """The metadata of a remote tool with MCP ``annotations`` (field names as on the
    wire) from the server the host named ``server``."""
    if not annotations:
        return {}
    hints = {
        flag: annotations[hint]
        for flag, hint in FLAGS.items()
        if type(annotations.get(hint)) is bool
    }
    metadata: dict[str, Any] = {HINTS_KEY: hints} if hints else {}
    if metadata and server is not None:
        metadata[SERVER_KEY] = server
    if isinstance(annotations.get("title"), str):
        metadata["title"] = annotations["title"]
    return metadata
