"""Where the rules file's limits are kept: the ``store`` and ``lease_s`` keys of ``[limits]``.

``store`` says where the caps of ``[limits]`` and the budgets of ``[[budget]]`` count:

- ``"process"`` (the default): in each process's memory; four worker processes each
  allow the whole cap and the whole budget;
- ``"approvals"``: in the approval store the command is given (``--approvals-store``,
  else ``$DSH_TOOLS_APPROVALS_URL``), else the workspace's own (the one ``dsh-tools
  approvals`` reads), shared by every process that uses it;
- a ``postgresql://`` URL, or the absolute path of a SQLite file (outside the workspace):
  in that store.

Reading the file only checks the setting; the store is opened when the ``limits`` and
``budgets`` entry points build their plugins (once per process and store, so both share
it), and one that cannot be opened refuses them, naming the file and line.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import attrs

from dsh_tools._numbers import positive_finite
from dsh_tools._plugins.settings import plugin_settings

from ..limits import SharedLimits
from .error import RulesError

__all__ = ["PROCESS", "SharedPlace", "place", "shared_limits"]

PROCESS = "process"
APPROVALS = "approvals"
_OPENED: dict[tuple[str, float], SharedLimits] = {}
"""The shared limits this process opened, by location and lease: one keeper each."""


@attrs.frozen
class SharedPlace:
    """A shared store the rules file names, and where it names it (for errors)."""

    store: str
    lease_s: float
    source: str
    line: int | None


def place(
    table: dict[str, object],
    fail: Callable[[str, str | None], Exception],
    source: str,
    line: Callable[[str], int | None],
) -> SharedPlace | None:
    """Take ``store`` and ``lease_s`` out of the ``[limits]`` ``table``: where its limits
    are shared (``None``: per process). Raises ``fail(problem, key)`` for a bad value."""
    store = table.pop("store", PROCESS)
    lease_s = table.pop("lease_s", None)
    if not isinstance(store, str) or not store.strip():
        raise fail(f"[limits] store must be {_CHOICES}, got {store!r}", "store")
    if store == PROCESS:
        if lease_s is not None:
            raise fail("[limits] lease_s needs a shared store (store = ...)", "lease_s")
        return None
    scheme = store.split("://")[0].lower() if "://" in store else None
    if scheme is not None and scheme not in ("postgresql", "postgres"):
        raise fail(f"[limits] store must be {_CHOICES}, got a {scheme}:// URL", "store")
    path = os.path.expanduser(store)
    if scheme is None and store != APPROVALS and not os.path.isabs(path):
        raise fail(f"[limits] store path {store!r} must be absolute (or start with ~)", "store")
    if lease_s is None:
        lease_s = 30.0
    elif not positive_finite(lease_s):
        raise fail(
            f"[limits] lease_s must be a positive finite number of seconds, got {lease_s!r}",
            "lease_s",
        )
    return SharedPlace(store, float(lease_s), source, line("store"))


def shared_limits(where: SharedPlace) -> SharedLimits:
    """The shared limits at ``where``, opened once per process; raises
    :class:`RulesError` naming the rules file's line when the store cannot be used."""
    from ..approval_store import APPROVALS_URL_ENV, ApprovalStoreError, SqliteApprovalStore

    workspace = plugin_settings().workspace or os.getcwd()
    location: str | None = where.store
    if location == APPROVALS:
        location = os.environ.get(APPROVALS_URL_ENV, "").strip() or None
    key = (location or f"the workspace {os.path.realpath(workspace)}", where.lease_s)
    if key not in _OPENED:
        try:
            if location is None:  # the workspace's own, as `dsh-tools approvals` reads
                store = SqliteApprovalStore.for_workspace(workspace)
                store.check()
                opened = SharedLimits(store, lease_s=where.lease_s)
            else:
                opened = SharedLimits.open(location, workspace=workspace, lease_s=where.lease_s)
        except ApprovalStoreError as error:
            raise RulesError(
                f"[limits] store: {error}", source=where.source, line=where.line
            ) from None
        _OPENED.setdefault(key, opened)
    return _OPENED[key]


_CHOICES = '"process", "approvals", a postgresql:// URL or the absolute path of a SQLite file'
