"""An approval store in PostgreSQL, shared by every process and machine that reaches it.

:class:`PostgresApprovalStore` keeps remembered answers in one database (extra:
``postgres``, psycopg 3)::

    store = PostgresApprovalStore("postgresql://dsh@db.internal/approvals")
    registry = ToolRegistry(approval=service, approval_store=store)

It keeps approval tickets too (:class:`dsh_tools.approvals.TicketStore`): a call asked
about on one machine can be answered from a second and resumed, exactly once, from a
third, and a process waiting for an answer is woken by ``LISTEN``/``NOTIFY`` as soon as
it is given.

Its tables live in the first schema of the connection's ``search_path``. Creating and
upgrading them is an explicit step, :func:`create_schema` (or ``dsh-tools approvals
init-store``), run once by a role that may create tables; a store only checks them when
it first connects, so it runs as a role that may only read and write their rows (a
missing or older schema fails closed, naming the command that fixes it).
``PostgresApprovalStore(url, create_schema=True)`` does the step itself, for a
developer's database and tests. When a grant ends, and whether a
ticket has expired, is judged by the server's clock (``now()``), never the client's. A
use of a counted grant, an answer and a resume are each one ``UPDATE`` that only matches
a row in the state it expects, so concurrent callers never share one.

A server that cannot be reached, a statement that fails or times out (``timeout_s``), or
a database whose schema is missing, older or newer raises
:class:`~dsh_tools_plugins.approval_store.ApprovalStoreError`, whose message names the
store by its URL without the password; the pipeline then fails closed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dsh_tools._models import ApprovalOutcome
from dsh_tools.approvals import (
    REMEMBERED_OUTCOMES,
    ApprovalKey,
    TicketWatchers,
    exact_outcome,
)
from dsh_tools.approvals._answers import GrantKeeping
from dsh_tools.approvals._journal import JOURNAL_RETENTION_S, retention

from ._stores.error import ApprovalStoreError
from ._stores.postgres import Connections
from ._stores.postgres_journal import PostgresJournal
from ._stores.postgres_listen import Listener
from ._stores.postgres_schema import SchemaStep, check_schema
from ._stores.postgres_schema import create_schema as _create
from ._stores.postgres_tickets import CHANNEL, RECHECK_S, PostgresTickets

if TYPE_CHECKING:
    import psycopg

    from ._stores.postgres import Prepare

__all__ = ["PostgresApprovalStore", "SchemaStep", "create_schema", "is_postgres_url"]

_ANY_ARGUMENTS = "*"
_KEY = "agent = %s AND tool = %s AND arguments_sha256 = %s"
_LIVE = "(expires_at IS NULL OR expires_at > now()) AND (uses_left IS NULL OR uses_left > 0)"


def is_postgres_url(location: str) -> bool:
    """Whether ``location`` names a PostgreSQL database (``postgresql://`` or
    ``postgres://``) rather than a file."""
    return location.lower().startswith(("postgresql://", "postgres://"))


def create_schema(url: str, *, timeout_s: float = 5.0) -> list[SchemaStep]:
    """Create the store's tables in the database at ``url``, or upgrade them to this
    version, in one transaction, and say what was done to each component. The role in
    ``url`` needs ``CREATE`` on the schema (the first of its ``search_path``); a schema a
    newer version made is refused. Running it again changes nothing. Raises
    :class:`ApprovalStoreError` naming the store (never its password)."""
    connections = _connections(url, timeout_s, None)
    try:
        return connections.run(_create)
    finally:
        connections.close()


class PostgresApprovalStore(PostgresTickets, PostgresJournal, GrantKeeping):
    """Remembered approvals in the PostgreSQL database at ``url`` (a libpq connection
    URI; ``?options=-csearch_path%3Dname`` picks the schema).

    :param timeout_s: how long connecting, or any one statement, may take before the
        operation fails (closed).
    :param create_schema: create or upgrade the tables on the first connection (as
        :func:`create_schema` does) rather than only check them: for a database the
        process's own role owns, such as a developer's or a test's.
    :param journal_retention_s: how long a finished journal entry is kept (see
        :meth:`~dsh_tools.approvals.JournalStore.prune_calls`): a week by default.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 5.0,
        create_schema: bool = False,
        journal_retention_s: float = JOURNAL_RETENTION_S,
    ) -> None:
        self.journal_retention_s = retention(journal_retention_s, "journal_retention_s")
        self._connections = _connections(url, timeout_s, _create if create_schema else check_schema)
        self._watchers = TicketWatchers(self.settled, RECHECK_S)
        self._listener = Listener(self._connections, CHANNEL, self._watchers)

    @property
    def url(self) -> str:
        """The store's URL as it may be shown (no password)."""
        return self._connections.shown

    def __repr__(self) -> str:
        return f"PostgresApprovalStore({self.url!r})"

    def check(self) -> None:
        """Connect and check the tables now: raise :class:`ApprovalStoreError` when the
        store cannot be used."""
        self._connections.run(lambda connection: connection.execute("SELECT 1"))

    def close(self) -> None:
        """Close the idle connections; the store reconnects when used again."""
        self._connections.close()

    def recall(self, key: ApprovalKey) -> ApprovalOutcome | None:
        rows = self._rows(
            f"SELECT outcome FROM dsh_tools_approvals WHERE {_KEY} AND {_LIVE}", _columns(key)
        )
        if not rows:
            return None
        outcome = exact_outcome(rows[0][0])
        if outcome not in REMEMBERED_OUTCOMES:
            raise ApprovalStoreError(self._connections.redacted(f"unknown outcome {rows[0][0]!r}"))
        return outcome

    def _keep(
        self, key: ApprovalKey, outcome: ApprovalOutcome, lifetime: float | None, uses: int | None
    ) -> None:
        self._rows(
            "INSERT INTO dsh_tools_approvals AS a (agent, tool, arguments_sha256, outcome, "
            "expires_at, uses_left) VALUES (%s, %s, %s, %s, "
            "now() + make_interval(secs => %s), %s) "
            "ON CONFLICT (agent, tool, arguments_sha256) DO UPDATE SET outcome = "
            "excluded.outcome, remembered_at = now(), expires_at = excluded.expires_at, "
            "uses_left = excluded.uses_left",
            (*_columns(key), outcome.value, lifetime, uses),
        )

    def use(self, key: ApprovalKey) -> ApprovalOutcome | None:
        """Take one use of the allowance under ``key`` (see
        :meth:`dsh_tools.approvals.LimitedGrantStore.use`)."""
        rows = self._rows(
            f"UPDATE dsh_tools_approvals SET uses_left = uses_left - 1 WHERE {_KEY} "
            f"AND {_LIVE} AND outcome = %s RETURNING outcome",
            (*_columns(key), ApprovalOutcome.ALLOWED_ALWAYS.value),
        )
        return ApprovalOutcome.ALLOWED_ALWAYS if rows else None

    def forget(self, agent: str | None = None) -> None:
        """Drop every remembered answer, or those of ``agent`` (and of no other scope)."""
        if agent is None:
            self._rows("DELETE FROM dsh_tools_approvals", ())
        else:
            self._rows("DELETE FROM dsh_tools_approvals WHERE agent = %s", (agent,))

    def _rows(self, statement: str, parameters: tuple[object, ...]) -> list[tuple[object, ...]]:
        def work(connection: psycopg.Connection[tuple[object, ...]]) -> list[tuple[object, ...]]:
            cursor = connection.execute(statement, parameters)
            return cursor.fetchall() if cursor.description is not None else []

        return self._connections.run(work)


def _connections(url: str, timeout_s: float, prepare: Prepare | None) -> Connections:
    """Connections to ``url``, a PostgreSQL URL psycopg can read (else the store's error,
    at once rather than at the first call)."""
    if type(url) is not str or not is_postgres_url(url):
        # Not echoed: a location of another kind may hold a password too.
        raise ApprovalStoreError(
            "a PostgreSQL approval store needs a postgresql:// URL, got another location"
        )
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise ApprovalStoreError(
            "the PostgreSQL approval store needs psycopg: install dsh-tools with its "
            "postgres extra (in a clone: pip install '.[postgres]')"
        ) from None
    connections = Connections(url, timeout_s, prepare)
    with connections.errors():
        from psycopg.conninfo import conninfo_to_dict

        conninfo_to_dict(url)
    return connections


def _columns(key: ApprovalKey) -> tuple[str, str, str]:
    return key.agent, key.tool_name, key.arguments_sha256 or _ANY_ARGUMENTS
