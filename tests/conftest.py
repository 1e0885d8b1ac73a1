"""Shared pytest configuration: async tests run on both anyio backends; the PostgreSQL
tests get a server's URL (or a cluster of their own to restart); on a root host, a
temporary folder of the session's own."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """On a root host, keep this session's temporary files (``tmp_path``) in a folder of
    its own rather than in ``/tmp/pytest-of-root``: every pytest session that starts
    (another checkout's, a test's own subprocess) makes that folder 0700 again, and the
    sandbox tests' workspaces below it must stay reachable for the unprivileged user
    that bubblewrap runs as there (see ``sandbox_owner.give_away``)."""
    if os.geteuid() == 0 and config.option.basetemp is None:
        config.option.basetemp = tempfile.mkdtemp(prefix="dsh-tools-tests-")
        config.stash[_OWN_BASETEMP] = config.option.basetemp


_OWN_BASETEMP = pytest.StashKey[str]()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove the session's own temporary folder after a passing run (a failing one keeps
    it to look into)."""
    folder = session.config.stash.get(_OWN_BASETEMP, None)
    if folder is not None and exitstatus == 0:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run every ``@pytest.mark.anyio`` test once on asyncio and once on trio."""
    return str(request.param)


POSTGRES_URL_VARIABLE = "DSH_TOOLS_TEST_POSTGRES_URL"
"""The PostgreSQL server the store tests use; `.ci/postgres start DIR` prints it."""


@pytest.fixture
def postgres_url(empty_postgres_url: str) -> str:
    """The test server's URL with a schema of this test's own first in ``search_path``,
    holding the approval store's tables (:func:`create_schema`, as a deployment's first
    step does)."""
    from dsh_tools_plugins.approval_postgres import create_schema

    create_schema(empty_postgres_url)
    return empty_postgres_url


@pytest.fixture
def empty_postgres_url() -> Iterator[str]:
    """The test server's URL with an empty schema of this test's own first in
    ``search_path`` (dropped afterwards). Skips without a server, except under CI, where
    it fails."""
    url = os.environ.get(POSTGRES_URL_VARIABLE, "")
    missing = "" if url else f"no PostgreSQL server: {POSTGRES_URL_VARIABLE} is not set"
    try:
        import psycopg
    except ImportError:
        missing = missing or "no PostgreSQL driver: psycopg is not installed"
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{missing}, and CI is set: the PostgreSQL tests must run in CI")
        pytest.skip(f"{missing} (see .ci/postgres)")
    schema = f"test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {schema}")
    try:
        yield f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(f"DROP SCHEMA {schema} CASCADE")


CLUSTER_SCRIPT = Path(__file__).resolve().parents[1] / ".ci" / "postgres"
"""Starts, restarts and stops a throwaway PostgreSQL cluster."""


class OwnCluster:
    """A PostgreSQL cluster of this test session's own, whose server a test may restart
    (the shared test server has other tests' connections on it)."""

    def __init__(self, folder: Path, url: str) -> None:
        self.folder = folder
        self.url = url

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every connection cut, back when this returns."""
        subprocess.run([str(CLUSTER_SCRIPT), "restart", str(self.folder)], check=True)


@pytest.fixture(scope="session")
def own_postgres() -> Iterator[OwnCluster]:
    """A cluster started with ``.ci/postgres start`` for this session (stopped at its end),
    its schema created. Needs root (the server runs as ``postgres``) and the server's
    binaries; skips without them, except under CI, where it fails."""
    missing = ""
    if os.geteuid() != 0:
        missing = "a PostgreSQL cluster of the tests' own needs root (.ci/postgres)"
    elif not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        missing = "no PostgreSQL server binaries under /usr/lib/postgresql"
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{missing}, and CI is set: the PostgreSQL tests must run in CI")
        pytest.skip(missing)
    parent = Path(tempfile.mkdtemp(prefix="dsh-tools-own-pg-"))
    parent.chmod(0o711)  # the server's user reaches its folder through this one
    folder = parent / "cluster"
    try:
        said = subprocess.run(
            [str(CLUSTER_SCRIPT), "start", str(folder)], check=True, capture_output=True, text=True
        ).stdout
        url = said.strip().partition("=")[2]  # export NAME=URL
        from dsh_tools_plugins.approval_postgres import create_schema

        create_schema(url)
        yield OwnCluster(folder, url)
    finally:
        subprocess.run([str(CLUSTER_SCRIPT), "stop", str(folder)], check=False)
        shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """Which approval store a contract test runs on: each first-party store in turn."""
    return str(request.param)


@pytest.fixture
def approval_store(
    store_kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Any]:
    """A new, empty first-party approval store of kind ``store_kind``."""
    if store_kind == "memory":
        from dsh_tools import MemoryApprovalStore

        yield MemoryApprovalStore()
    elif store_kind == "sqlite":
        from dsh_tools_plugins.approval_store import SqliteApprovalStore

        yield SqliteApprovalStore(tmp_path / "approvals.sqlite3")
    else:
        from dsh_tools_plugins.approval_postgres import PostgresApprovalStore

        store = PostgresApprovalStore(request.getfixturevalue("postgres_url"))
        yield store
        store.close()
