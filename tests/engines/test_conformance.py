"""One behaviour on every engine: the same cases inline, on Temporal and on DBOS (SQLite
and PostgreSQL), each through the engine's own workflow and worker."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from engine_harness import wait_for_ticket
from engine_tools import lines, wait_for_line

from dsh_tools.approvals import TicketAnswer, TicketState
from dsh_tools_plugins.approval_store import SqliteApprovalStore
from dsh_tools_plugins.engines.temporal import result_text


def call(name: str, agent: str = "agent-1", **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments, "agent": agent}


def code(result: dict[str, Any]) -> str:
    return str(result["error"]["info"]["code"]) if result["isError"] else "ok"


def observed(engine: Any, tool: str) -> list[str]:
    """The codes the result observers saw for ``tool``'s calls, in order."""
    return [line.split()[2] for line in lines(engine.state, "observed") if line.split()[1] == tool]


def test_an_allowed_call_runs_and_its_result_comes_back(engine: Any) -> None:
    result = engine.result(engine.start(call("echo", text="hi")))

    assert (code(result), result_text(result)) == ("ok", "echo hi")
    assert observed(engine, "echo") == ["ok"]


def test_a_denied_call_never_runs(engine: Any) -> None:
    result = engine.result(engine.start(call("forbidden", text="hi")))

    assert code(result) == "DENIED"
    assert "may not call forbidden" in result["error"]["message"]
    assert observed(engine, "forbidden") == ["DENIED"]


def test_ask_waits_for_a_person_then_resumes_the_call_once(engine: Any) -> None:
    handle = engine.start(call("write", path="a.txt"))
    ticket = wait_for_ticket(engine.state)
    assert lines(engine.state, "effects") == []  # it waits: nothing ran
    store = SqliteApprovalStore(engine.state / "approvals.sqlite3")
    store.answer_ticket(ticket, TicketAnswer("allowed-once", by="ana", channel="cli"))

    result = engine.result(handle)

    assert (code(result), result_text(result)) == ("ok", "wrote a.txt")
    assert lines(engine.state, "effects") == ["wrote a.txt"]
    assert store.get_ticket(ticket).state is TicketState.RESUMED  # type: ignore[union-attr]
    again = engine.registry.resume_sync(ticket)  # the ticket's answer was taken: never twice
    assert (again.code, again.meta) == (None, {"journal": "replayed"})  # its recorded result
    assert lines(engine.state, "effects") == ["wrote a.txt"]


def test_a_rejection_reaches_the_model_with_the_persons_feedback(engine: Any) -> None:
    handle = engine.start(call("write", path="a.txt"))
    ticket = wait_for_ticket(engine.state)
    store = SqliteApprovalStore(engine.state / "approvals.sqlite3")
    answer = TicketAnswer("rejected", by="ana", channel="cli", feedback="use b.txt")
    store.answer_ticket(ticket, answer)

    result = engine.result(handle)

    assert code(result) == "DENIED"
    assert result["error"]["message"] == 'the user rejected tool "write": use b.txt'
    assert lines(engine.state, "effects") == []


def test_a_call_past_its_time_budget_ends_tool_timeout(engine: Any) -> None:
    started = time.monotonic()
    result = engine.result(engine.start({**call("slow", seconds=20), "timeout_s": 0.5}))

    assert code(result) == "TOOL_TIMEOUT"
    assert time.monotonic() - started < 10
    assert observed(engine, "slow") == ["TOOL_TIMEOUT"]


def test_cancelling_fires_the_running_calls_signal(engine: Any) -> None:
    handle = engine.start(call("slow", seconds=20))
    wait_for_line(engine.state, "effects", "slow started")

    engine.cancel(handle)

    wait_for_line(engine.state, "effects", "slow saw its signal")
    wait_for_line(engine.state, "observed", "")
    assert observed(engine, "slow") == ["ABORTED"]
    if engine.name in ("inline", "temporal"):  # the caller gets the aborted result
        assert code(engine.result(handle)) == "ABORTED"


def test_progress_is_shown_where_the_engine_shows_it(engine: Any) -> None:
    handle = engine.start(call("slow", seconds=20))
    wait_for_line(engine.state, "effects", "slow started")
    deadline, shown = time.monotonic() + 10, None
    while shown is None and time.monotonic() < deadline:
        shown = engine.progress(handle)
        time.sleep(0.05)
    engine.cancel(handle)

    assert shown is not None
    assert {k: shown[k] for k in ("type", "tool", "done", "total", "message")} == {
        "type": "progress",
        "tool": "slow",
        "done": 1,
        "total": 3,
        "message": "first third",
    }
    assert shown["call_id"]
    wait_for_line(engine.state, "observed", "")


def approve_from_the_command_line(engine: Any) -> Any:
    """``dsh-tools approvals approve TICKET``, as a person would type it, a while later."""

    def approve(ticket: str) -> None:
        time.sleep(0.5)
        store = str(engine.state / "approvals.sqlite3")
        workspace = engine.state / "workspace"  # the store lies outside it, as it must
        workspace.mkdir(exist_ok=True)
        command = [str(Path(sys.executable).parent / "dsh-tools"), "--approvals-store", store]
        done = subprocess.run(
            [*command, "approvals", "approve", ticket, "--by", "ana"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=workspace,
        )
        assert done.returncode == 0, done.stderr

    return approve


def test_an_approval_given_while_no_worker_runs_is_resumed_by_the_next_one(engine: Any) -> None:
    result = engine.restarted(call("write", path="a.txt"), approve_from_the_command_line(engine))

    assert (code(result), result_text(result)) == ("ok", "wrote a.txt")
    assert lines(engine.state, "effects") == ["wrote a.txt"]


def test_a_worker_killed_mid_body_never_runs_a_non_idempotent_body_twice(engine: Any) -> None:
    # The engine retries the call (its activity or step, or the host the same call) after
    # the worker is killed; the retry meets the killed attempt's call journal entry.
    result = engine.crashed(call("crash", key="k1"))

    runs = lines(engine.state, "effects")
    assert runs == ["ran k1"], f"ran {len(runs)} times"  # once; never twice, never lost
    assert code(result) == "OUTCOME_UNKNOWN"  # the killed attempt's outcome is not known
    assert "may or may not have run" in result["error"]["message"]


def test_a_worker_killed_mid_body_reruns_an_idempotent_body(engine: Any) -> None:
    result = engine.crashed(call("crash_idempotent", key="k1"))

    assert lines(engine.state, "effects") == ["ran k1", "ran k1"]
    assert (code(result), result_text(result)) == ("ok", "crash done")
