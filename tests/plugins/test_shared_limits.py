"""Limits that hold across processes: four worker processes on one SQLite file, and on one
PostgreSQL database, configured by the rules file's ``[limits] store``. A budget of 5
runs exactly 5 calls, a cap of 1 never has two bodies at once, and the permit (and the
place in line) of a worker killed with SIGKILL comes back within its lease."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

WORKER = """
import json, os, sys, threading, time
from pathlib import Path

import anyio

from dsh_tools import ToolExecutionInput, ToolRegistry, define_tool
from dsh_tools._plugins.loading import load_plugins

name, log, calls, driver, go = sys.argv[1:]
log, calls, go = Path(log), int(calls), Path(go)
inside = log.with_name("inside")


def write(line):
    with open(log, "a") as out:
        out.write(line + "\\n")


def body(args, ctx):
    write(f"entered {name}")
    if driver == "hold":
        time.sleep(3600)
    try:
        os.close(os.open(inside, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        write("overlap")
        return "ran alongside another"
    time.sleep(0.02)
    os.unlink(inside)
    return "done"


registry = ToolRegistry()
registry.register(define_tool(name="work", description="Work.", parameters={}, execute=body))
report = load_plugins(registry, only=["default_permissions", "limits", "budgets"])
assert report.ok, report
while not go.exists():
    time.sleep(0.005)
call = ToolExecutionInput("c", "work")
if driver == "async":
    async def main():
        codes = []
        async def one():
            result = await registry.execute(call)
            codes.append(result.code or "ok")
            if result.code:
                print(result.code, result.error.message, file=sys.stderr)
        async with anyio.create_task_group() as group:
            for _ in range(calls):
                group.start_soon(one)
        return codes
    codes = anyio.run(main)
else:
    codes = []
    def one():
        result = registry.execute_sync(call)
        codes.append(result.code or "ok")
        if result.code:
            print(result.code, result.error.message, file=sys.stderr)
    threads = [threading.Thread(target=one) for _ in range(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
print(json.dumps(codes))
"""


class Site:
    """Where the workers run: a workspace, a rules file, the store, a log of bodies."""

    def __init__(
        self,
        tmp_path: Path,
        database: str,
        limits: str,
        started: list[subprocess.Popen[str]],
    ) -> None:
        self.database = database
        self.started = started
        self.workspace = tmp_path / "workspace"
        self.workspace.mkdir()
        self.log = tmp_path / "bodies.log"
        self.go = tmp_path / "go"
        self.rules = tmp_path / "rules.toml"
        self.rules.write_text(f'default = "allow"\n\n[limits]\nstore = "approvals"\n{limits}')

    def start(self, name: str, calls: int, driver: str) -> subprocess.Popen[str]:
        environment = {
            **os.environ,
            "DSH_TOOLS_RULES": str(self.rules),
            "DSH_TOOLS_WORKSPACE": str(self.workspace),
            "DSH_TOOLS_APPROVALS_URL": self.database,
        }
        environment.pop("DSH_TOOLS_BLOCK_PLUGINS", None)
        command = [sys.executable, "-c", WORKER, name, str(self.log), str(calls), driver]
        process = subprocess.Popen(
            [*command, str(self.go)],
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.started.append(process)
        return process

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def waiting(self) -> int:
        """Places taken in the store's line for a permit, by every process."""
        if self.database.startswith("postgresql://"):
            import psycopg

            with psycopg.connect(self.database) as server:
                row = server.execute("SELECT count(*) FROM dsh_tools_permit_waiters").fetchone()
        else:
            with sqlite3.connect(self.database) as file:
                row = file.execute("SELECT count(*) FROM permit_waiters").fetchone()
            file.close()
        assert row is not None
        return int(row[0])


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the workers keep their limits: a SQLite file, or a PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "approvals.sqlite3")
    return str(request.getfixturevalue("postgres_url"))


def codes(process: subprocess.Popen[str]) -> list[str]:
    """What ``process`` printed, the code of each call it made; killed (and its output
    shown) when it has not finished in 180 s, so a hung worker outlives no test."""
    try:
        out, err = process.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"a worker hung; its output: {out!r}, {err!r}") from None
    assert process.returncode == 0, err
    found = list(json.loads(out))
    assert set(found) <= {"ok", "DENIED"}, err  # what failed, and why
    return found


@pytest.fixture
def reaped() -> Iterator[list[subprocess.Popen[str]]]:
    """The worker processes a test starts: each still running at its end is killed."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate()


def until(condition: Callable[[], bool], seconds: float = 120) -> None:
    give_up = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < give_up, "the condition never held"
        time.sleep(0.01)


def four_workers(site: Site, calls: int) -> list[str]:
    """Four workers (two with threads under ``execute_sync``, two with tasks under
    ``await execute``) making ``calls`` calls each at once; every call's code."""
    workers = [site.start(f"w{n}", calls, "sync" if n % 2 else "async") for n in range(4)]
    site.go.touch()
    return [code for worker in workers for code in codes(worker)]


def test_a_budget_of_5_across_4_workers_runs_exactly_5_calls(
    tmp_path: Path, database: str, reaped: list[subprocess.Popen[str]]
) -> None:
    site = Site(tmp_path, database, '\n[[budget]]\ntools = "work"\nlimit = 5\n', reaped)
    results = four_workers(site, calls=5)
    assert sorted(results) == ["DENIED"] * 15 + ["ok"] * 5
    assert len([line for line in site.lines() if line.startswith("entered")]) == 5


def test_a_cap_of_1_across_4_workers_never_has_two_bodies_at_once(
    tmp_path: Path, database: str, reaped: list[subprocess.Popen[str]]
) -> None:
    site = Site(tmp_path, database, "overall = 1\n", reaped)
    results = four_workers(site, calls=5)
    assert results == ["ok"] * 20
    lines = site.lines()
    assert "overlap" not in lines
    assert len(lines) == 20


def test_a_killed_workers_permit_and_place_in_line_come_back_within_the_lease(
    tmp_path: Path, database: str, reaped: list[subprocess.Popen[str]]
) -> None:
    lease_s = 1.0
    site = Site(tmp_path, database, f"overall = 1\nlease_s = {lease_s}\n", reaped)
    site.go.touch()
    holder = site.start("holder", 1, "hold")
    until(lambda: "entered holder" in site.lines())
    queued = site.start("queued", 1, "sync")  # killed while it waits
    until(lambda: site.waiting() == 1)
    last = site.start("last", 1, "async")
    until(lambda: site.waiting() == 2)
    time.sleep(3 * lease_s)  # the holder renews its lease: nobody else gets in
    assert site.lines() == ["entered holder"]
    for process in (holder, queued):
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=60)
    killed = time.monotonic()
    assert codes(last) == ["ok"]
    assert time.monotonic() - killed < lease_s + 10  # a lease, and generous slack for CI
    assert site.lines() == ["entered holder", "entered last"]
    assert site.waiting() == 0
