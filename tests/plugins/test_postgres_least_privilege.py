"""The PostgreSQL store as a real role that has only the rights docs/approvals-postgres.md
lists: it runs tickets, the journal, shared limits and calls; it cannot create the
schema, and a store it opens on a database without one says what to run."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy_calls import allowed_deploy, code, deploy, make_registry
from dsh_tools import ToolExecutionInput, ToolRegistry, define_tool
from dsh_tools_plugins.approval_store import ApprovalStoreError
from store_contract import StoreContract

psycopg = pytest.importorskip("psycopg", reason="PostgreSQL driver psycopg is not installed")

from psycopg.conninfo import conninfo_to_dict  # noqa: E402

from dsh_tools_plugins.approval_postgres import (  # noqa: E402
    PostgresApprovalStore,
    create_schema,
)
from dsh_tools_plugins.limits import CallBudget, ConcurrencyLimit, SharedLimits  # noqa: E402

DOC = Path(__file__).parents[2] / "docs" / "approvals-postgres.md"
PASSWORD = "w0rker-pa55"


def documented_grants() -> list[str]:
    """The SQL block of the doc's "rights a worker's role needs", one statement each."""
    section = DOC.read_text().split("### The rights a worker's role needs", 1)[1]
    block = re.search(r"```sql\n(.*?)```", section, re.S)
    assert block is not None
    return [" ".join(s.split()) for s in block.group(1).split(";") if s.strip()]


class Role:
    """A login role of a test's own in the test server (roles belong to the whole server,
    so its name is unique, and it is dropped afterwards)."""

    def __init__(self, owner_url: str) -> None:
        self.owner_url = owner_url
        self.name = f"dsh_worker_{uuid.uuid4().hex[:12]}"
        parts = conninfo_to_dict(owner_url)
        self.schema = re.sub(r"^-csearch_path=", "", str(parts["options"]))
        self.url = "postgresql://{}:{}@{}:{}/{}?options=-csearch_path%3D{}".format(
            self.name, PASSWORD, parts["host"], parts["port"], parts["dbname"], self.schema
        )
        self.owner(f"CREATE ROLE {self.name} LOGIN PASSWORD '{PASSWORD}'")

    def owner(self, statement: str) -> None:
        with psycopg.connect(self.owner_url, autocommit=True) as connection:
            connection.execute(statement)

    def grant_what_the_doc_lists(self) -> None:
        for statement in documented_grants():
            renamed = statement.replace("dsh_worker", self.name)
            self.owner(re.sub(r"\bapprovals\b", self.schema, renamed))

    def drop(self) -> None:
        self.owner(f"DROP OWNED BY {self.name}")
        self.owner(f"DROP ROLE {self.name}")


@pytest.fixture
def role(empty_postgres_url: str) -> Iterator[Role]:
    made = Role(empty_postgres_url)
    yield made
    made.drop()


@pytest.fixture
def worker_url(role: Role) -> str:
    """The role's URL, once the owner made the schema and granted what the doc lists."""
    create_schema(role.owner_url)
    role.grant_what_the_doc_lists()
    return role.url


def test_the_doc_grants_rights_on_rows_only() -> None:
    grants = documented_grants()
    assert len(grants) == 4
    assert all(statement.startswith("GRANT ") for statement in grants)
    assert not any(re.search(r"\b(CREATE|ALL|OWNER|TRUNCATE)\b", s) for s in grants)


def test_the_role_cannot_create_the_schema_and_is_told_who_can(role: Role) -> None:
    role.owner(f"GRANT USAGE ON SCHEMA {role.schema} TO {role.name}")
    store = PostgresApprovalStore(role.url)
    with pytest.raises(ApprovalStoreError) as opened:
        store.check()
    message = str(opened.value)
    assert message.startswith(f"approval store postgresql://{role.name}@")
    assert "no dsh-tools schema" in message
    assert "`dsh-tools approvals init-store --approvals-store URL`" in message
    assert PASSWORD not in message
    with pytest.raises(ApprovalStoreError, match="permission denied for schema") as created:
        create_schema(role.url)
    assert PASSWORD not in str(created.value)
    with pytest.raises(ApprovalStoreError, match="permission denied for schema"):
        PostgresApprovalStore(role.url, create_schema=True).check()


def test_the_role_runs_calls_that_ask_and_are_remembered(worker_url: str) -> None:
    store = PostgresApprovalStore(worker_url)
    registry, approval, ran = make_registry(store)
    approval.answer("allowed-always")
    first, second = deploy(), deploy()
    assert not registry.execute_sync(first).is_error
    assert not registry.execute_sync(second).is_error  # remembered: asked once
    assert registry.execute_sync(first).text == "deployed"  # the journal replays it
    assert len(ran) == 2
    assert len(approval.requests) == 1
    store.forget()
    store.close()


def test_the_role_runs_shared_limits(worker_url: str) -> None:
    shared = SharedLimits(PostgresApprovalStore(worker_url), lease_s=30)
    registry = ToolRegistry()
    registry.register(
        define_tool(name="fetch", description="d", parameters={}, execute=lambda a, c: "page")
    )
    registry.add_plugin(CallBudget(2, "fetch", store=shared))
    registry.add_plugin(ConcurrencyLimit({"fetch": 1}, store=shared))
    results = [registry.execute_sync(ToolExecutionInput(f"c{n}", "fetch")) for n in range(3)]
    assert [result.is_error for result in results] == [False, False, True]
    assert "limit of 2 fetch calls" in results[2].text
    shared.store.close()


def test_a_role_without_the_rights_fails_calls_closed(role: Role) -> None:
    create_schema(role.owner_url)
    role.owner(f"GRANT USAGE ON SCHEMA {role.schema} TO {role.name}")
    role.owner(f"GRANT SELECT ON {role.schema}.dsh_tools_schema TO {role.name}")
    store = PostgresApprovalStore(role.url)
    result, ran = allowed_deploy(store)
    store.close()
    assert code(result) == "POLICY_ERROR"
    assert "permission denied for table" in result.error.message
    assert ran == []


class TestLeastPrivilegedStore(StoreContract):
    """The store contract (tickets, remembered answers, the journal) as the role."""

    @pytest.fixture
    def store(self, worker_url: str) -> Iterator[Any]:
        store = PostgresApprovalStore(worker_url)
        yield store
        store.close()
