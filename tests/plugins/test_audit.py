"""AuditLog: durable JSON Lines events, rotation, a tolerant reader, replay into cards."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import subprocess
import sys
import threading
import tracemalloc
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from dsh_tools._cancel import CancelSource
from dsh_tools._define import define_tool
from dsh_tools._models import Allow, Deny, ToolExecution, ToolExecutionInput
from dsh_tools._registry import ToolRegistry
from dsh_tools.errors import ErrorCode, ToolError
from dsh_tools.hookspecs import hookimpl
from dsh_tools.presentation import GenericCallView, GenericResultView, TerminalCallView
from dsh_tools_plugins.audit import AuditLog, AuditLogError, read_audit_log, replay
from dsh_tools_plugins.retry import RetryPolicy


def echo_registry(log: AuditLog) -> ToolRegistry:
    registry = ToolRegistry()

    def echo(args: Any, ctx: Any) -> str:
        if args["text"] == "boom":
            raise ToolError("it broke", code="BROKEN")
        return str(args["text"])

    registry.register(
        define_tool(
            name="echo",
            description="echo",
            parameters={"text": {"type": "string", "required": True}},
            execute=echo,
            present_call=lambda args: TerminalCallView(f"echo {args['text']}"),
        )
    )
    registry.add_plugin(log)
    return registry


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_calls_and_results_are_logged_in_order(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "audit.jsonl"
    registry = echo_registry(AuditLog(path))

    registry.execute_sync(ToolExecutionInput("c1", "echo", {"text": "héllo"}, root_call_id="r"))
    registry.scope("agent").execute_sync(ToolExecutionInput("c2", "echo", {"text": "boom"}))

    events = lines(path)
    assert [(e["event"], e["call_id"]) for e in events] == [
        ("tool/call", "c1"),
        ("tool/result", "c1"),
        ("tool/call", "c2"),
        ("tool/result", "c2"),
    ]
    call, result, _, failure = events
    assert call == {
        "event": "tool/call",
        "time": call["time"],
        "call_id": "c1",
        "root_call_id": "r",
        "agent": None,
        "name": "echo",
        "arguments": {"text": "héllo"},
    }
    assert result["content"] == [{"type": "text", "text": "héllo"}]
    assert (result["is_error"], result["error"], result["meta"]) == (False, None, None)
    assert result["started"] == call["time"]
    assert result["duration_ms"] >= 0
    for event in events:
        when = datetime.fromisoformat(event["time"])
        assert when.utcoffset() == timezone.utc.utcoffset(None)
    assert failure["agent"] == "agent"
    assert failure["is_error"] is True
    assert failure["error"] == {
        "message": "it broke",
        "info": {"name": "ToolError", "code": "BROKEN"},
    }
    assert "héllo" in path.read_text(encoding="utf-8")  # UTF-8, not \\u escapes


def test_denied_calls_are_logged_even_when_policy_decides_first(tmp_path: Path) -> None:
    class DenyAll:
        @hookimpl(tryfirst=True)
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> Deny:
            return Deny("nope")

    path = tmp_path / "audit.jsonl"
    registry = echo_registry(AuditLog(path))
    registry.add_plugin(DenyAll())  # later and tryfirst too: runs before the audit hook

    registry.execute_sync(ToolExecutionInput("c1", "echo", {"text": "x"}))

    events = lines(path)
    assert [e["event"] for e in events] == ["tool/call", "tool/result"]
    assert events[1]["error"]["info"]["code"] == "DENIED"


def test_calls_that_never_reach_policy_are_logged_with_their_result(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    registry = echo_registry(AuditLog(path))
    source = CancelSource()
    source.cancel()

    registry.execute_sync(ToolExecutionInput("c1", "echo", {"text": {1, 2}}))
    registry.execute_sync(ToolExecutionInput("c2", "echo", {"text": "x"}, signal=source.signal))

    events = lines(path)
    assert [(e["event"], e["call_id"]) for e in events] == [
        ("tool/call", "c1"),
        ("tool/result", "c1"),
        ("tool/call", "c2"),
        ("tool/result", "c2"),
    ]
    assert events[0]["arguments"] is None
    assert events[1]["error"]["info"]["code"] == "INVALID_JSON"
    assert events[1]["duration_ms"] == 0
    assert events[3]["error"]["info"]["code"] == "ABORTED_BEFORE_DISPATCH"


CHILD = """
import os, signal, sys
from dsh_tools._define import define_tool
from dsh_tools._models import ToolExecutionInput
from dsh_tools._registry import ToolRegistry
from dsh_tools_plugins.audit import AuditLog

def body(args, ctx):
    if args["text"] == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    return args["text"]

registry = ToolRegistry()
registry.register(define_tool(
    name="echo", description="echo",
    parameters={"text": {"type": "string", "required": True}}, execute=body,
))
registry.add_plugin(AuditLog(sys.argv[1]))
for index in range(3):
    registry.execute_sync(ToolExecutionInput(f"c{index}", "echo", {"text": f"t{index}"}))
registry.execute_sync(ToolExecutionInput("last", "echo", {"text": sys.argv[2]}))
os._exit(1)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
@pytest.mark.parametrize("ending", ["exit", "die"])
def test_a_killed_process_loses_nothing(tmp_path: Path, ending: str) -> None:
    path = tmp_path / "audit.jsonl"
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), ending], capture_output=True, timeout=60
    )
    assert child.returncode != 0, child.stderr

    events = list(read_audit_log(path, strict=True))
    kinds = [(e.event, e.call_id) for e in events]
    assert kinds[:6] == [
        ("tool/call", "c0"),
        ("tool/result", "c0"),
        ("tool/call", "c1"),
        ("tool/result", "c1"),
        ("tool/call", "c2"),
        ("tool/result", "c2"),
    ]
    if ending == "exit":  # killed between calls: everything is there
        assert kinds[6:] == [("tool/call", "last"), ("tool/result", "last")]
    else:  # killed inside the body: the call is there, its result never happened
        assert kinds[6:] == [("tool/call", "last")]
        replayed = list(replay(path, ToolRegistry()))
        assert [r.call.call_id for r in replayed] == ["c0", "c1", "c2", "last"]
        assert replayed[-1].result is None
        assert replayed[-1].result_card is None


def test_rotation_by_size(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    registry = echo_registry(AuditLog(path, max_bytes=1500, backups=2))

    for index in range(8):
        registry.execute_sync(ToolExecutionInput(f"c{index}", "echo", {"text": "x" * 50}))

    names = sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".lock")
    assert names == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]
    assert (tmp_path / "audit.jsonl.lock").exists()  # the writers' lock is not rotated
    for name in names:
        assert (tmp_path / name).stat().st_size <= 1500
    events = list(read_audit_log(path, rotated=True, strict=True))
    ids = [e.call_id for e in events if e.event == "tool/result"]
    assert ids == sorted(ids)  # oldest first
    assert ids[-1] == "c7"  # the newest kept
    assert len(ids) < 8  # the oldest file beyond two backups was dropped


def test_a_torn_last_line_is_reported_not_fatal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "audit.jsonl"
    registry = echo_registry(AuditLog(path))
    registry.execute_sync(ToolExecutionInput("c1", "echo", {"text": "a"}))
    with path.open("ab") as handle:
        handle.write(b'{"event":"tool/call","call_id":"c2","na')

    with caplog.at_level(logging.WARNING, logger="dsh_tools"):
        events = list(read_audit_log(path))
    assert [e.call_id for e in events] == ["c1", "c1"]
    assert "audit.jsonl:3: skipped a torn last line (39 bytes, no newline)" in caplog.text
    with pytest.raises(AuditLogError, match=r"audit\.jsonl:3: a torn last line"):
        list(read_audit_log(path, strict=True))

    # The next write cuts the torn record, so every line of the file is an event again.
    registry2 = echo_registry(AuditLog(path))
    registry2.execute_sync(ToolExecutionInput("c3", "echo", {"text": "b"}))
    events = list(read_audit_log(path, strict=True))
    assert [e.call_id for e in events] == ["c1", "c1", "c3", "c3"]
    assert [line["call_id"] for line in lines(path)] == ["c1", "c1", "c3", "c3"]


def test_replay_pairs_calls_with_results_and_presents_them(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    registry = echo_registry(AuditLog(path))
    registry.execute_sync(ToolExecutionInput("c1", "echo", {"text": "hi"}))
    registry.execute_sync(ToolExecutionInput("c2", "echo", {"text": "boom"}))
    registry.execute_sync(ToolExecutionInput("c3", "gone", {"x": 1}))

    replayed = list(replay(path, registry))

    assert [r.call.call_id for r in replayed] == ["c1", "c2", "c3"]
    first, second, third = replayed
    assert first.call == ToolExecutionInput("c1", "echo", {"text": "hi"}, root_call_id="c1")
    assert first.call_card == TerminalCallView("echo hi")  # the tool's own presenter
    assert first.result is not None
    assert first.result.content == [{"type": "text", "text": "hi"}]
    assert first.result_card == GenericResultView()
    assert first.error is None
    assert second.result is not None
    assert second.result.is_error
    assert second.error is not None
    assert second.error.info.code == "BROKEN"
    assert third.call_card == GenericCallView("gone", raw_input={"x": 1})  # fallback card
    assert third.error is not None
    assert third.error.info.code == "UNKNOWN_TOOL"


def test_settings_are_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        AuditLog(tmp_path / "a", max_bytes=0)
    with pytest.raises(ValueError, match="backups"):
        AuditLog(tmp_path / "a", backups=-1)


def test_each_event_is_appended_to_whatever_file_is_there(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    registry = echo_registry(log)
    registry.execute_sync(ToolExecutionInput("c1", "echo", {"text": "a"}))
    path.rename(tmp_path / "archived.jsonl")  # an external logrotate
    registry.execute_sync(ToolExecutionInput("c2", "echo", {"text": "b"}))
    assert [e["call_id"] for e in lines(path)] == ["c2", "c2"]
    assert repr(log) == f"<AuditLog {str(path)!r}>"


# ------------------------------------------------------------------------- text that is not Unicode


def test_no_event_is_dropped_for_text_that_is_not_valid_unicode(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    registry = echo_registry(AuditLog(path))

    def broken(args: Any, ctx: Any) -> str:
        raise ToolError("cannot open caf\udce9.txt")

    registry.register(define_tool(name="broken", description="d", parameters={}, execute=broken))
    registry.execute_sync(ToolExecutionInput("c1", "broken", {}))  # a message with a surrogate
    registry.execute_sync(ToolExecutionInput("c2", "caf\udce9", {}))  # an unknown, bad name
    registry.execute_sync(ToolExecutionInput("c\ud800", "echo", {"text": "x"}))  # a bad call id
    registry.execute_sync(ToolExecutionInput("c4", "echo", {"text": "caf\udce9"}))  # bad text

    events = list(read_audit_log(path, strict=True))
    assert [(e.event, e.call_id) for e in events] == [
        ("tool/call", "c1"),
        ("tool/result", "c1"),
        ("tool/call", "c2"),
        ("tool/result", "c2"),
        ("tool/call", "c\ufffd"),
        ("tool/result", "c\ufffd"),
        ("tool/call", "c4"),
        ("tool/result", "c4"),
    ]
    assert events[1].data["error"]["message"] == "cannot open caf\ufffd.txt"
    assert events[2].data["name"] == "caf\ufffd"
    assert "\ufffd" in json.dumps(events[7].data["content"], ensure_ascii=False) or (
        events[6].data["arguments"] is None  # arguments that are not Unicode are not JSON
    )


# --------------------------------------------------------------------------- call ids


def test_a_call_id_that_is_not_a_string_is_refused_before_anything_is_logged(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    registry = echo_registry(AuditLog(path))
    with pytest.raises(TypeError, match=r"ToolExecutionInput\.call_id"):
        registry.execute_sync(ToolExecutionInput(7, "echo", {"text": "x"}))  # type: ignore[arg-type]
    assert not path.exists() or path.read_text(encoding="utf-8") == ""


def test_logs_with_integer_call_ids_from_earlier_versions_still_read(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    call = {"event": "tool/call", "call_id": 7, "root_call_id": 7, "agent": None}
    call |= {"name": "echo", "arguments": {"text": "x"}, "time": "t"}
    result = {"event": "tool/result", "call_id": 7, "root_call_id": 7, "agent": None}
    result |= {"name": "echo", "is_error": False, "content": [], "error": None, "meta": None}
    path.write_text(json.dumps(call) + "\n" + json.dumps(result) + "\n")

    assert [e.call_id for e in read_audit_log(path, strict=True)] == ["7", "7"]
    (replayed,) = replay(path, ToolRegistry())
    assert replayed.call.call_id == "7"
    assert replayed.result is not None


# --------------------------------------------------------------------------- one file, many logs


def test_two_audit_logs_on_one_file_share_its_rotation(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    # max_bytes=1 rotates before every write; enough backups keep every event
    registries = [echo_registry(AuditLog(path, max_bytes=1, backups=250)) for _ in range(2)]
    failures: list[str] = []

    def work(worker: int) -> None:
        for index in range(25):
            call = ToolExecutionInput(f"{worker}-{index}", "echo", {"text": "x"})
            result = registries[worker % 2].execute_sync(call)
            if result.is_error:
                failures.append(result.text)

    threads = [threading.Thread(target=work, args=(worker,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failures == []
    events = sorted((e.call_id, e.event) for e in read_audit_log(path, rotated=True, strict=True))
    ids = [f"{worker}-{index}" for worker in range(4) for index in range(25)]
    assert events == sorted((i, kind) for i in ids for kind in ("tool/call", "tool/result"))


# --------------------------------------------------------------------------- the call event


def test_the_call_event_is_on_disk_before_the_body_runs_whatever_decides_first(
    tmp_path: Path,
) -> None:
    class FastPath:
        @hookimpl(tryfirst=True)
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> Allow:
            return Allow()

    path = tmp_path / "audit.jsonl"
    seen: list[list[tuple[str, str]]] = []

    def body(args: Any, ctx: Any) -> str:
        seen.append([(e.event, e.call_id) for e in read_audit_log(path, strict=True)])
        return "ok"

    registry = ToolRegistry()
    registry.register(define_tool(name="t", description="d", parameters={}, execute=body))
    registry.add_plugin(AuditLog(path))
    registry.add_plugin(FastPath())  # added later, tryfirst too: decides before anything else

    registry.execute_sync(ToolExecutionInput("c1", "t", {}))

    assert seen == [[("tool/call", "c1")]]


def test_a_call_that_cannot_be_recorded_does_not_run(tmp_path: Path) -> None:
    ran: list[str] = []
    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="t", description="d", parameters={}, execute=lambda a, c: ran.append("ran")
        )
    )
    registry.add_plugin(AuditLog(tmp_path / "logs" / "audit.jsonl"))
    (tmp_path / "logs").rmdir()
    (tmp_path / "logs").write_text("")  # no directory there any more

    result = registry.execute_sync(ToolExecutionInput("c1", "t", {}))

    assert result.code == "DENIED"
    assert "AuditLog" in result.text
    assert ran == []


def test_one_call_event_per_call_however_often_a_wrapper_retries(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    attempts: list[int] = []

    def flaky(args: Any, ctx: Any) -> str:
        attempts.append(len(attempts))
        if len(attempts) < 3:
            raise ToolError("try again", code=ErrorCode.TRANSIENT)
        return "done"

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="flaky",
            description="d",
            parameters={},
            execute=flaky,
            metadata={"idempotent": True},
        )
    )
    registry.add_plugin(AuditLog(path))
    registry.add_plugin(RetryPolicy(backoff_ms=0))

    result = registry.execute_sync(ToolExecutionInput("c1", "flaky", {}))

    assert result.text == "done"
    assert len(attempts) == 3
    assert [e["event"] for e in lines(path)] == ["tool/call", "tool/result"]


def test_calls_whose_result_is_never_observed_do_not_accumulate(tmp_path: Path) -> None:
    # A host that drops a call (closes its coroutine while the body runs) means the
    # result hook never runs for that call; the log must not keep it forever.
    log = AuditLog(tmp_path / "audit.jsonl")
    registry = echo_registry(log)
    entered: list[object] = []

    async def hang(args: Any, ctx: Any) -> str:
        entered.append(args)
        await asyncio.Event().wait()
        return "never"

    registry.register(define_tool(name="hang", description="d", parameters={}, execute=hang))

    async def dropped(count: int) -> None:
        for index in range(count):
            call = registry.execute(ToolExecutionInput(f"c{index}", "hang", {}))
            while not entered:
                call.send(None)  # step the call until its body waits
            entered.clear()
            call.close()

    def calls(count: int) -> None:
        asyncio.run(dropped(count))

    tracemalloc.start(_FRAMES)
    try:
        # The interpreter keeps freed floats, tuples and frames on free lists, which
        # tracemalloc counts as allocated: a first batch fills them (and the caches);
        # only what grows with the next, larger batch is kept per call.
        calls(300)
        growth = []
        # A background thread of the project that an earlier test left running (a
        # limits keeper, a store's watcher) may allocate during a batch; what the calls
        # keep grows in every batch, so the smallest of three is what they keep.
        for _ in range(3):
            gc.collect()
            before = _kept_by_the_project()
            calls(900)
            gc.collect()
            growth.append(_kept_by_the_project() - before)
            if growth[-1] < 20_000:
                break
    finally:
        tracemalloc.stop()
    assert min(growth) < 20_000, f"{growth} bytes kept for 900 dropped calls, each batch"


_FRAMES = 6
"""Frames tracemalloc keeps per allocation: enough to reach the project's code from an
allocation inside attrs, pluggy or the standard library."""


def _kept_by_the_project() -> int:
    """Bytes still allocated with a project source file on their stack. tracemalloc sees
    every thread's allocations; a background thread an earlier test left running (a
    server, a pool) is not what the audit log and the pipeline keep."""
    source = str(Path(sys.modules["dsh_tools"].__file__ or "").parent.parent)
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(True, f"{source}/*", all_frames=True)]
    )
    return sum(stat.size for stat in snapshot.statistics("filename"))


def test_each_result_event_holds_the_decision_record_and_replay_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    registry = echo_registry(AuditLog(path))

    class NoBoom:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> Deny | None:
            if execution.arguments and execution.arguments["text"] == "boom":
                return Deny("no booms", detail={"why": "loud"})
            return None

    registry.add_plugin(NoBoom(), name="no-boom")
    registry.execute_sync(ToolExecutionInput("c1", "echo", {"text": "hi"}))
    registry.execute_sync(ToolExecutionInput("c2", "echo", {"text": "boom"}))

    results = [event for event in lines(path) if event["event"] == "tool/result"]
    assert [event["record"]["outcome"] for event in results] == ["ok", "DENIED"]
    denial = [step for step in results[1]["record"]["steps"] if step["decision"] == "deny"]
    assert denial == [
        {
            "stage": "pre_execute",
            "source": "no-boom",
            "decision": "deny",
            "reason": "no booms",
            "detail": {"why": "loud"},
            "at_ms": denial[0]["at_ms"],
            "ms": denial[0]["ms"],
        }
    ]
    replayed = list(replay(path, registry))
    assert [r.record.outcome if r.record else None for r in replayed] == ["ok", "DENIED"]
    decided = replayed[1].record.decided_by if replayed[1].record else None
    assert decided is not None
    assert (decided.source, decided.reason) == ("no-boom", "no booms")


def test_an_audit_log_inside_the_workspace_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dsh_tools._hostfiles import HostFileError

    monkeypatch.setenv("DSH_TOOLS_WORKSPACE", str(tmp_path))
    with pytest.raises(HostFileError, match="keep it outside the workspace") as info:
        AuditLog(tmp_path / "logs" / "calls.jsonl")
    assert str(info.value).startswith(f"the audit log {tmp_path}/logs/calls.jsonl: ")
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("swap", ["last", "parent"])
def test_a_link_planted_later_is_never_written_through(tmp_path: Path, swap: str) -> None:
    """The log checked when made, then swapped for a link to a shell start-up file: the
    next event is refused (and its call does not run), the target is untouched."""
    victim = tmp_path / "victim.sh"
    victim.write_text("# start-up\n")
    logs = tmp_path / "logs"
    path = logs / "audit.jsonl"
    registry = echo_registry(AuditLog(path))
    assert not registry.execute_sync(ToolExecutionInput("c1", "echo", {"text": "a"})).is_error
    if swap == "last":
        path.unlink()
        path.symlink_to(victim)
    else:  # the folder renamed, a link to the victim's folder in its place
        logs.rename(tmp_path / "moved")
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "elsewhere" / "audit.jsonl").symlink_to(victim)
        logs.symlink_to("elsewhere")
    result = registry.execute_sync(ToolExecutionInput("c2", "echo", {"text": "b"}))
    assert result.code == "DENIED"
    assert "a symbolic link" in result.text
    assert victim.read_text() == "# start-up\n"


def test_an_audit_log_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    from dsh_tools._hostfiles import HostFileError

    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(HostFileError, match="is not a regular file"):
        AuditLog(tmp_path / "fifo")
