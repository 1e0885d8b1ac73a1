"""Which approval store a command uses, and how it says which: a ticket approved in one
store is not found in another, so every message about tickets names the store it read.

The store is the one ``--approvals-store`` names, else ``$DSH_TOOLS_APPROVALS_URL``, else
(for the commands that keep tickets) the workspace's own SQLite store, outside the
workspace, in ``$XDG_STATE_HOME``. :mod:`dsh_tools.cli` is the public entry point.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

import attrs

from ._exits import UsageError

if TYPE_CHECKING:
    from ..approvals import ApprovalStore

__all__ = ["ChosenStore", "chosen_store", "named_location", "store_location", "ticket_store"]

STORE_ERROR = "STORE_ERROR"
"""What ``--json`` reports for an approval store that cannot be used."""


@attrs.frozen
class ChosenStore:
    """An approval store, where it is (a file, or a URL without its password), and what
    chose it (an option, the environment, the workspace's default)."""

    store: ApprovalStore
    location: str
    chosen_by: str

    def __str__(self) -> str:
        return f"{self.location}, {self.chosen_by}"


def store_location(store: object) -> str:
    """Where ``store`` keeps its data, as it may be shown: a SQLite store's file, a
    PostgreSQL store's URL without its password, else the store's class."""
    path = getattr(store, "path", None)
    if isinstance(path, os.PathLike):
        return str(os.fspath(path))
    url = getattr(store, "url", None)
    return url if isinstance(url, str) else f"a {type(store).__qualname__}"


def workspace_root() -> str:
    """The workspace the command works in (``--workspace`` was exported before)."""
    return os.environ.get("DSH_TOOLS_WORKSPACE") or os.getcwd()


def named_location(options: argparse.Namespace) -> tuple[str, str] | None:
    """What names the store and where it is: ``--approvals-store``, else
    ``$DSH_TOOLS_APPROVALS_URL``; ``None`` when neither is set."""
    from dsh_tools_plugins.approval_store import APPROVALS_URL_ENV

    if options.approvals_store is not None:
        return "--approvals-store", options.approvals_store
    location = os.environ.get(APPROVALS_URL_ENV)
    return None if location is None else (f"${APPROVALS_URL_ENV}", location)


def chosen_store(options: argparse.Namespace) -> ChosenStore | None:
    """The store ``--approvals-store`` (else ``$DSH_TOOLS_APPROVALS_URL``) names, checked
    now; ``None`` when neither is set. A store that cannot be used stops the command
    (exit 2): it never falls back to another."""
    from dsh_tools_plugins.approval_store import ApprovalStoreError, open_approval_store

    named = named_location(options)
    if named is None:
        return None
    given, location = named
    try:
        store = open_approval_store(location, workspace=workspace_root())
    except ApprovalStoreError as error:
        raise UsageError(f"{given.lstrip('$')}: {error}", code=STORE_ERROR) from None
    return ChosenStore(store, store_location(store), f"named by {given}")


def ticket_store(options: argparse.Namespace) -> ChosenStore:
    """The store the options name, else the workspace's, checked now; a store that keeps
    no tickets, or cannot be used, is an error naming it (exit 2)."""
    from dsh_tools_plugins.approval_store import ApprovalStoreError, SqliteApprovalStore

    chosen = chosen_store(options)
    if chosen is None:
        workspace = workspace_root()
        default = SqliteApprovalStore.for_workspace(workspace)
        chosen = ChosenStore(
            default, str(default.path), f"the default store of workspace {workspace}"
        )
        try:
            default.check()
        except ApprovalStoreError as error:
            raise UsageError(f"{error} ({chosen.chosen_by})", code=STORE_ERROR) from None
    if not callable(getattr(chosen.store, "answer_ticket", None)):
        raise UsageError(
            f"the approval store {type(chosen.store).__qualname__} keeps no tickets "
            f"(approval store {chosen})",
            code=STORE_ERROR,
        )
    return chosen
