"""What an engine's retried attempt of a call does, in this process: a tool that is not
idempotent does not run again (``OUTCOME_UNKNOWN``), unless the earlier attempt only
opened the call's ticket; and what a workflow module imports."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from engine_tools import build_registry, lines

from dsh_tools import CancelSource
from dsh_tools.approvals import TicketAnswer
from dsh_tools_plugins.engines._calls import (
    Attempt,
    CallRequest,
    guard_retries,
    run_call,
    run_resume,
)


def attempt(state: Path, number: int, name: str, call_id: str = "k-1", **arguments: Any) -> Any:
    registry = build_registry(state)
    guard_retries(registry)
    request = CallRequest(name, arguments, "agent-1")
    run = run_call(
        registry,
        request,
        call_id=call_id,
        attempt=Attempt("test", number),
        signal=CancelSource().signal,
    )
    return asyncio.run(run)


def _began_and_died(state: Path, call_id: str, name: str, **arguments: Any) -> None:
    """An earlier attempt of ``call_id`` whose body began and whose worker died: its call
    journal entry, with a lease that ran out."""
    from dsh_tools.approvals import JournalEntry, call_digest

    store = build_registry(state).approval_store
    digest = call_digest(name, arguments)
    entry = JournalEntry("agent-1", call_id, name, digest, call_id, "worker-a:1:dead")
    assert store.begin_call(entry, 0.0).started  # type: ignore[attr-defined]


def test_a_retried_attempt_of_a_tool_that_is_not_idempotent_does_not_run(tmp_path: Path) -> None:
    _began_and_died(tmp_path, "k-1", "echo", text="hi")

    result = attempt(tmp_path, 2, "echo", text="hi")

    assert result["error"]["info"]["code"] == "OUTCOME_UNKNOWN"
    assert "may or may not have run" in result["error"]["message"]
    assert lines(tmp_path, "observed") == ["k-1 echo OUTCOME_UNKNOWN"]  # the observers saw it


def test_a_retried_attempt_of_an_idempotent_tool_runs_again(tmp_path: Path) -> None:
    (tmp_path / "effects").write_text("ran before\n")  # so the body returns at once

    result = attempt(tmp_path, 2, "crash_idempotent", key="x")

    assert result["isError"] is False
    assert lines(tmp_path, "effects") == ["ran before", "ran x"]


def test_policy_decides_before_a_retried_attempt_is_judged(tmp_path: Path) -> None:
    _began_and_died(tmp_path, "k-1", "forbidden", text="hi")

    assert attempt(tmp_path, 3, "forbidden", text="hi")["error"]["info"]["code"] == "DENIED"


def test_a_retried_attempt_takes_an_answer_no_attempt_took(tmp_path: Path) -> None:
    first = attempt(tmp_path, 1, "write", call_id="k-other", path="b.txt")
    ticket = first["meta"]["approval"]["ticket"]
    build_registry(tmp_path).approval_store.answer_ticket(  # type: ignore[attr-defined]
        ticket, TicketAnswer("allowed-once", by="ana", channel="cli")
    )

    retried = attempt(tmp_path, 2, "write", call_id="k-2", path="b.txt")

    assert retried["isError"] is False  # the journal says no body of it began: it runs
    assert lines(tmp_path, "effects") == ["wrote b.txt"]


def test_a_retried_attempt_whose_earlier_one_only_asked_runs_once_answered(
    tmp_path: Path,
) -> None:
    first = attempt(tmp_path, 1, "write", path="a.txt")
    ticket = first["meta"]["approval"]["ticket"]
    build_registry(tmp_path).approval_store.answer_ticket(  # type: ignore[attr-defined]
        ticket, TicketAnswer("allowed-once", by="ana", channel="cli")
    )

    result = attempt(tmp_path, 2, "write", path="a.txt")  # the same call id: it only asked

    assert result["isError"] is False
    assert lines(tmp_path, "effects") == ["wrote a.txt"]


def test_a_retried_resume_of_a_ticket_whose_call_finished_replays_its_result(
    tmp_path: Path,
) -> None:
    registry = build_registry(tmp_path)
    first = attempt(tmp_path, 1, "write", path="a.txt")
    ticket = first["meta"]["approval"]["ticket"]
    registry.approval_store.answer_ticket(  # type: ignore[attr-defined]
        ticket, TicketAnswer("allowed-once", by="ana", channel="cli")
    )
    signal = CancelSource().signal
    resumed = asyncio.run(run_resume(registry, ticket, attempt=Attempt("test"), signal=signal))
    assert resumed["isError"] is False

    retried = asyncio.run(run_resume(registry, ticket, attempt=Attempt("test", 2), signal=signal))

    assert (retried["isError"], retried["meta"]) == (False, {"journal": "replayed"})
    assert retried["content"] == resumed["content"]
    assert lines(tmp_path, "effects") == ["wrote a.txt"]


def test_a_retried_attempt_whose_earlier_one_never_began_runs(tmp_path: Path) -> None:
    # The earlier attempt died before its body began (no journal entry): nothing ran.
    result = attempt(tmp_path, 2, "echo", call_id="k-fresh", text="hi")

    assert result["isError"] is False


def test_the_workflow_code_s_outcome_unknown_is_the_error_code() -> None:
    from dsh_tools import ErrorCode
    from dsh_tools_plugins.engines._waiting import OUTCOME_UNKNOWN

    assert ErrorCode.OUTCOME_UNKNOWN.value == OUTCOME_UNKNOWN


def test_workflow_code_imports_nothing_of_dsh_tools() -> None:
    code = (
        "import sys, dsh_tools_plugins.engines.temporal\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'dsh_tools'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert out.stdout.strip() == "[]"


def test_a_retried_resume_looks_at_its_ticket_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = build_registry(tmp_path)
    ticket = attempt(tmp_path, 1, "write", path="a.txt")["meta"]["approval"]["ticket"]
    store: Any = registry.approval_store
    store.answer_ticket(ticket, TicketAnswer("allowed-once", by="ana", channel="cli"))
    signal = CancelSource().signal
    asyncio.run(run_resume(registry, ticket, attempt=Attempt("test"), signal=signal))
    readers: list[int] = []
    read = store.get_ticket

    def get_ticket(ticket_id: str) -> Any:
        readers.append(threading.get_ident())
        return read(ticket_id)

    monkeypatch.setattr(store, "get_ticket", get_ticket)

    async def retried() -> int:
        await run_resume(registry, ticket, attempt=Attempt("test", 2), signal=signal)
        return threading.get_ident()

    loop_thread = asyncio.run(retried())

    assert readers[0] != loop_thread  # the attempt's own look, before the resume's
