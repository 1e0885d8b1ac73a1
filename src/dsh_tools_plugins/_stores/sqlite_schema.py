"""The SQLite approval store's schema, and the upgrade of a file made by an older version.

A file records its schema version in ``PRAGMA user_version``. :func:`upgrade` runs the
steps from the file's version to :data:`SCHEMA_VERSION` in one transaction that holds the
file's write lock, so a crash leaves the file as it was and two processes opening an old
file at once upgrade it once. Steps only add: no row of an older file is lost.
"""

from __future__ import annotations

import sqlite3

from dsh_tools.errors import DshToolsError, ErrorCode

from .sqlite_journal import JOURNAL_SCHEMA
from .sqlite_limits import LIMITS_SCHEMA
from .sqlite_tickets import SCHEMA as TICKETS

__all__ = ["SCHEMA_VERSION", "SchemaError", "upgrade"]

_STEPS: tuple[tuple[str, ...], ...] = (
    # 1: remembered answers.
    (
        "CREATE TABLE IF NOT EXISTS approvals (agent TEXT NOT NULL, tool TEXT NOT NULL, "
        "arguments_sha256 TEXT NOT NULL, outcome TEXT NOT NULL, remembered_at REAL NOT NULL, "
        "PRIMARY KEY (agent, tool, arguments_sha256))",
    ),
    # 2: grants that end: when (seconds since the epoch) and after how many more uses;
    # approval tickets.
    (
        "ALTER TABLE approvals ADD COLUMN expires_at REAL",
        "ALTER TABLE approvals ADD COLUMN uses_left INTEGER",
        *TICKETS,
    ),
    # 3: a ticket's answer may end (``expires_in_s`` and ``uses`` in its JSON). Nothing
    # to add, but version 2 code would read such an answer as a grant that never ends,
    # so the version moves on and that code refuses the file.
    (),
    # 4: shared limits: permits, their waiters, budget spending.
    LIMITS_SCHEMA,
    # 5: the call journal.
    JOURNAL_SCHEMA,
)

SCHEMA_VERSION = len(_STEPS)
"""The version :func:`upgrade` brings a file to."""


class SchemaError(DshToolsError):
    """The file's schema is of a version this code does not know."""

    default_code = ErrorCode.POLICY_ERROR.value


def upgrade(connection: sqlite3.Connection) -> None:
    """Bring the database on ``connection`` to :data:`SCHEMA_VERSION`. Raises
    :class:`SchemaError` for a newer (or foreign) version, ``sqlite3.Error`` when the file
    cannot be read or written; either way the file is left unchanged."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        if not 0 <= version <= SCHEMA_VERSION:
            raise SchemaError(f"schema version {version}, expected at most {SCHEMA_VERSION}")
        for step in _STEPS[version:]:
            for statement in step:
                connection.execute(statement)
        if version != SCHEMA_VERSION:
            connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        connection.rollback()
        raise
    connection.commit()
