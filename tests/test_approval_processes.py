"""Approvals across processes, on one SQLite file and on one PostgreSQL database: one
process asks and exits, a second approves, a third resumes, and the body runs exactly
once, however many resume at once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HOST = """
import json, sys
from dsh_tools import Ask, TicketAnswer, ToolExecutionInput, ToolRegistry, define_tool, hookimpl
from dsh_tools_plugins.approval_store import open_approval_store

mode, database, ran, *rest = sys.argv[1:]
store = open_approval_store(database, timeout_s=60)

class AskAlways:
    @hookimpl
    def dsh_tools_pre_execute(self, execution):
        return Ask("writes files")

def write(args, ctx):
    with open(ran, "a") as log:
        log.write(args["path"] + "\\n")
    return "written"

registry = ToolRegistry(approval=lambda request: "pending", approval_store=store)
registry.register(define_tool(name="write", description="Write.",
    parameters={"path": {"type": "string", "required": True}}, execute=write))
registry.add_plugin(AskAlways())
call = ToolExecutionInput("c1", "write", {"path": "a.txt"}, agent="coder")
if mode == "ask":
    result = registry.execute_sync(call)
    print(json.dumps({"code": result.error.info.code, "ticket": result.meta["approval"]["ticket"]}))
elif mode == "approve":
    store.answer_ticket(rest[0], TicketAnswer("allowed-once", "ana", "cli"))
else:
    result = registry.resume_sync(rest[0]) if mode == "resume" else registry.execute_sync(call)
    code = result.error.info.code if result.is_error else "ok"
    replayed = result.meta is not None and result.meta.get("journal") == "replayed"
    print(json.dumps({"code": code + (" replayed" if replayed else "")}))
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the processes keep their tickets: a SQLite file, or a PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "approvals.sqlite3")
    return str(request.getfixturevalue("postgres_url"))


def host(tmp_path: Path, database: str, *arguments: str) -> subprocess.Popen[str]:
    ran = str(tmp_path / "ran.log")
    command = [sys.executable, "-c", HOST, arguments[0], database, ran, *arguments[1:]]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(process: subprocess.Popen[str]) -> dict[str, str]:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return json.loads(out) if out.strip() else {}


def runs(tmp_path: Path) -> list[str]:
    log = tmp_path / "ran.log"
    return log.read_text().splitlines() if log.exists() else []


def test_ask_in_one_process_approve_in_a_second_resume_in_a_third(
    tmp_path: Path, database: str
) -> None:
    asked = finished(host(tmp_path, database, "ask"))
    assert asked["code"] == "APPROVAL_PENDING"
    finished(host(tmp_path, database, "approve", asked["ticket"]))
    assert runs(tmp_path) == []
    assert finished(host(tmp_path, database, "resume", asked["ticket"])) == {"code": "ok"}
    # The same call again: the journal's record of it, not a second run.
    again = finished(host(tmp_path, database, "resume", asked["ticket"]))
    assert again == {"code": "ok replayed"}
    assert runs(tmp_path) == ["a.txt"]


def test_eight_processes_resume_one_ticket_and_the_body_runs_once(
    tmp_path: Path, database: str
) -> None:
    asked = finished(host(tmp_path, database, "ask"))
    finished(host(tmp_path, database, "approve", asked["ticket"]))
    processes = [host(tmp_path, database, "resume", asked["ticket"]) for _ in range(8)]
    codes = sorted(finished(process)["code"] for process in processes)
    assert runs(tmp_path) == ["a.txt"]
    assert codes == ["ok"] + ["ok replayed"] * 7  # one ran; the rest got its result


def test_the_model_repeating_the_call_after_approval_runs_it_once(
    tmp_path: Path, database: str
) -> None:
    asked = finished(host(tmp_path, database, "ask"))
    finished(host(tmp_path, database, "approve", asked["ticket"]))
    processes = [host(tmp_path, database, "repeat") for _ in range(4)]
    codes = sorted(finished(process)["code"] for process in processes)
    assert runs(tmp_path) == ["a.txt"]
    assert codes.count("ok") == 1
    assert set(codes) <= {"ok", "ok replayed", "DENIED", "APPROVAL_PENDING"}
