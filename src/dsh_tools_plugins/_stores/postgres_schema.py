"""The PostgreSQL approval store's schema: its components, creating and upgrading them (an
explicit step, by a role that may create tables), and checking them when a store opens.

Each component (remembered answers and tickets, shared limits, the call journal) is one
row of :data:`COMPONENTS`: its name, its version, the DDL that creates it and the steps
that upgrade it. ``dsh_tools_schema`` records each component's version. Opening a store
only reads that table (:func:`check_schema`); :func:`create_schema` is the only code that
runs DDL, so the role a store runs as needs no right to create anything.

:mod:`dsh_tools_plugins.approval_postgres` is the public face.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .postgres_journal import JOURNAL_SCHEMA, JOURNAL_SCHEMA_VERSION
from .postgres_limits import LIMITS_SCHEMA, LIMITS_SCHEMA_VERSION
from .postgres_tickets import TICKETS_SCHEMA

if TYPE_CHECKING:
    import psycopg

    Connection = psycopg.Connection[tuple[Any, ...]]

__all__ = ["COMPONENTS", "INIT_COMMAND", "Component", "SchemaStep", "check_schema", "create_schema"]

INIT_COMMAND = "dsh-tools approvals init-store --approvals-store URL"
"""What creates or upgrades the schema, as the messages name it."""
_LOCK = 0x647368746F6F6C73
"""The advisory lock that orders schema changes between processes ("dshtools")."""


@attrs.frozen
class Component:
    """Tables that one part of the store keeps, at ``version``: ``tables`` creates them,
    ``upgrades[n]`` takes them from version ``n`` to ``n + 1``."""

    name: str
    version: int
    tables: Sequence[str]
    upgrades: Mapping[int, Sequence[str]] = attrs.field(factory=dict)


COMPONENTS = (
    Component(
        "approvals",
        2,
        (
            "CREATE TABLE dsh_tools_approvals (agent text NOT NULL, tool text NOT NULL, "
            "arguments_sha256 text NOT NULL, outcome text NOT NULL, "
            "remembered_at timestamptz NOT NULL DEFAULT now(), expires_at timestamptz, "
            "uses_left integer CHECK (uses_left >= 0), "
            "PRIMARY KEY (agent, tool, arguments_sha256))",
            *TICKETS_SCHEMA,
        ),
        # Version 2: a ticket's answer may end (``expires_in_s`` and ``uses`` in its JSON),
        # which version 1 code would read as a grant that never ends; the tables are 1's.
        upgrades={1: ()},
    ),
    Component("limits", LIMITS_SCHEMA_VERSION, LIMITS_SCHEMA),
    Component("journal", JOURNAL_SCHEMA_VERSION, JOURNAL_SCHEMA),
)
"""Every component of the store, in the order they are created (a new table is a line)."""


@attrs.frozen
class SchemaStep:
    """What :func:`create_schema` did to one component: created it (``found`` is
    ``None``), upgraded it from version ``found``, or found it at ``version`` already."""

    component: str
    found: int | None
    version: int

    def __str__(self) -> str:
        if self.found is None:
            return f"{self.component}: created at version {self.version}"
        if self.found != self.version:
            return f"{self.component}: upgraded from version {self.found} to {self.version}"
        return f"{self.component}: at version {self.version} already"


def create_schema(connection: Connection) -> list[SchemaStep]:
    """Create the missing components and upgrade the older ones, in the caller's
    transaction; a component newer than this version knows refuses the whole change
    (raises ``ValueError``)."""
    connection.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
    connection.execute(
        "CREATE TABLE IF NOT EXISTS dsh_tools_schema "
        "(component text PRIMARY KEY, version integer NOT NULL)"
    )
    found = _versions(connection)
    _refuse_newer(found)
    steps = []
    for component in COMPONENTS:
        version = found.get(component.name)
        if version is None:
            for statement in component.tables:
                connection.execute(statement)
            connection.execute(
                "INSERT INTO dsh_tools_schema VALUES (%s, %s)", (component.name, component.version)
            )
        else:
            for step in range(version, component.version):
                for statement in component.upgrades[step]:
                    connection.execute(statement)
            connection.execute(
                "UPDATE dsh_tools_schema SET version = %s WHERE component = %s",
                (component.version, component.name),
            )
        steps.append(SchemaStep(component.name, version, component.version))
    return steps


def check_schema(connection: Connection) -> None:
    """Raise ``ValueError`` unless every component is there at the version this code
    knows; the message says what is missing or older and the command that fixes it, or
    that a newer schema is refused. Runs no DDL."""
    (exists,) = connection.execute(
        "SELECT to_regclass('dsh_tools_schema') IS NOT NULL"
    ).fetchone() or (False,)
    if not exists:
        raise ValueError(
            "no dsh-tools schema in this database (the first schema of the URL's "
            f"search_path): create it once with `{INIT_COMMAND}` (this store's URL), as a "
            "role that may create tables; then this role needs only the rights "
            "docs/approvals-postgres.md lists (without USAGE on the schema, it cannot "
            "see the tables either)"
        )
    found = _versions(connection)
    _refuse_newer(found)
    behind = [
        f"{component.name} {_shown(found.get(component.name))}, needs {component.version}"
        for component in COMPONENTS
        if found.get(component.name) != component.version
    ]
    if behind:
        raise ValueError(
            f"the dsh-tools schema is older than this version of dsh-tools ({'; '.join(behind)}): "
            f"upgrade it with `{INIT_COMMAND}` (this store's URL), as a role that may "
            "create tables"
        )


def _versions(connection: Connection) -> dict[str, int]:
    rows = connection.execute("SELECT component, version FROM dsh_tools_schema").fetchall()
    return {str(name): int(version) for name, version in rows}


def _refuse_newer(found: Mapping[str, int]) -> None:
    for component in COMPONENTS:
        version = found.get(component.name)
        if version is not None and not 1 <= version <= component.version:
            raise ValueError(
                f"{component.name} schema version {version}, expected at most "
                f"{component.version}: a newer dsh-tools made it, refused"
            )


def _shown(version: int | None) -> str:
    return "missing" if version is None else f"at version {version}"
