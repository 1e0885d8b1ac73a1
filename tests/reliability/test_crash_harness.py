"""The crash harness, CI-sized: worker processes on one SQLite file and on one
PostgreSQL database, requests that need a person's approval, workers killed (SIGKILL)
while they run, and the database restarted twice (PostgreSQL: a cluster of the tests'
own, ``pg_ctl restart -m fast``; SQLite: every worker killed at once). No request runs
twice, no approval is spent without a record, every request is answered, and every
unknown attempt is settled by the tool's reconcile step (or, without one, answered
``OUTCOME_UNKNOWN``, never run blindly)."""

from __future__ import annotations

import importlib.util
import sys
import uuid
from pathlib import Path
from types import ModuleType

import pytest

HARNESS = Path(__file__).resolve().parents[2] / "benchmarks" / "crash_harness.py"


def _harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("crash_harness", HARNESS)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("crash_harness", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> list[str]:
    """The harness's options naming the store, and the cluster it restarts."""
    if request.param == "sqlite":
        return ["--store", str(tmp_path / "approvals.sqlite3")]
    cluster = request.getfixturevalue("own_postgres")
    return ["--store", cluster.url, "--pg-cluster", str(cluster.folder)]


@pytest.mark.parametrize("reconcile", [True, False], ids=["reconcile", "no-reconcile"])
def test_killed_workers_never_run_a_request_twice(store: list[str], reconcile: bool) -> None:
    harness = _harness()
    argv = [*store, "--workers", "3", "--requests", "16", "--kills", "4", "--db-restarts", "2"]
    argv += ["--kill-every", "0.5", "--timeout-s", "50", "--tag", uuid.uuid4().hex[:8]]
    options = harness.argparse_options(argv + ([] if reconcile else ["--no-reconcile"]))
    counts = harness.run(options)
    assert counts["kills"] == 4
    assert counts["db restarts"] == 2
    assert counts["ran twice"] == 0, counts
    assert counts["approvals spent without a record"] == 0, counts
    assert sum(counts["results"].values()) == counts["requests"] == 16  # all answered
    assert counts["ran once"] + counts["not run"] == 16
    if reconcile:
        assert counts["unknown, unsettled"] == 0, counts  # the tool settled every one
    else:
        assert counts["unknown, reconciled"] == 0
        # A request answered OUTCOME_UNKNOWN ran exactly once, in the killed attempt.
        assert counts["ran once"] == 16 - counts["not run"]


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "no-key"])
def test_killed_mcp_http_workers_never_run_a_request_twice(store: list[str], keyed: bool) -> None:
    """The trial that found the journal missing: each worker serves over streamable HTTP
    (``serve_http``, approvals pending) to the official MCP client, one bearer token for
    all; a worker is killed mid-call and the client repeats the call on another. Without
    a key, a repeat whose earlier run finished (its reply lost) is a new call and runs;
    no run may overlap or follow an unfinished one."""
    pytest.importorskip("mcp")
    harness = _harness()
    argv = [*store, "--workers", "3", "--requests", "16", "--kills", "4", "--db-restarts", "1"]
    argv += ["--kill-every", "0.5", "--timeout-s", "90", "--tag", uuid.uuid4().hex[:8]]
    argv += ["--transport", "mcp", *([] if keyed else ["--no-key"])]
    counts = harness.run(harness.argparse_options(argv))
    assert counts["kills"] == 4
    assert counts["db restarts"] == 1
    assert counts["ran twice against the promise"] == 0, counts
    assert counts["approvals spent without a record"] == 0, counts
    assert sum(counts["results"].values()) == counts["requests"] == 16  # all answered
    assert counts["unknown, unsettled"] == 0, counts  # the tool settled every one
