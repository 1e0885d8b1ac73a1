"""Progress and output events: the tool author's API, listeners, the filter step and
coalescing, through ``execute`` and ``execute_sync``."""

from __future__ import annotations

import logging
import threading
import tracemalloc
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_tools import (
    ToolExecutionInput,
    ToolRegistry,
    ToolRunContext,
    define_tool,
    hookimpl,
)
from dsh_tools._cancel import CancelSource
from dsh_tools._models import ToolExecution
from dsh_tools.progress import DROP, Output, Progress, StreamSummary
from dsh_tools.testing import ProgressRecorder
from streaming import SECRET, Redact


def _registry(execute: Any, *, blocking: bool = False, timeout_ms: float | None = None) -> Any:
    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="work",
            description="Do some work.",
            parameters={},
            execute=execute,
            blocking=blocking,
            timeout_ms=timeout_ms,
        )
    )
    return registry


def _reporting(ctx: ToolRunContext) -> str:
    ctx.emit_output("line 1\n")
    ctx.emit_output("oops\n", "stderr")
    ctx.emit_output("line 2\n")
    ctx.report_progress(1, 2, "half")
    ctx.report_progress(2, 2, "done")
    return "finished"


def test_a_def_body_streams_to_a_listener_plugin_and_the_result_is_unchanged() -> None:
    registry = _registry(lambda args, ctx: _reporting(ctx))
    recorder = ProgressRecorder()
    registry.add_plugin(recorder)
    result = registry.execute_sync(ToolExecutionInput("c1", "work"))
    assert result.text == "finished"
    events = recorder.events("c1")
    assert recorder.output("c1") == "line 1\noops\nline 2\n"
    assert recorder.output("c1", "stderr") == "oops\n"
    assert [event.stream for event in events if isinstance(event, Output)][:2] == [
        "stdout",
        "stderr",
    ]
    assert recorder.progress("c1")[-1] == Progress(2, 2, "done")


@pytest.mark.parametrize("blocking", [False, True])
def test_async_and_blocking_bodies_stream_to_the_calls_own_listener(blocking: bool) -> None:
    seen: list[tuple[str, Progress | Output]] = []

    async def async_body(args: Any, ctx: ToolRunContext) -> str:
        await anyio.sleep(0)
        return _reporting(ctx)

    body = (lambda args, ctx: _reporting(ctx)) if blocking else async_body
    registry = _registry(body, blocking=blocking)

    def listener(execution: ToolExecution, event: Progress | Output) -> None:
        seen.append((execution.call_id, event))

    result = anyio.run(registry.execute, ToolExecutionInput("c2", "work", on_progress=listener))
    assert result.text == "finished"
    texts = "".join(event.text for _, event in seen if isinstance(event, Output))
    assert texts == "line 1\noops\nline 2\n"
    assert {call_id for call_id, _ in seen} == {"c2"}


def test_threads_a_body_starts_may_report() -> None:
    def body(args: Any, ctx: ToolRunContext) -> str:
        workers = [threading.Thread(target=lambda n=n: ctx.emit_output(f"{n}\n")) for n in range(8)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        return "ok"

    recorder = ProgressRecorder()
    registry = _registry(body)
    registry.add_plugin(recorder)
    registry.execute_sync(ToolExecutionInput("c3", "work"))
    assert sorted(recorder.output("c3").split()) == [str(n) for n in range(8)]


def test_without_a_listener_reports_do_nothing_and_check_nothing() -> None:
    registry = _registry(lambda args, ctx: (ctx.report_progress("bad"), "ok")[1])  # type: ignore[arg-type]
    assert registry.execute_sync(ToolExecutionInput("c4", "work")).text == "ok"


def test_with_a_listener_a_bad_report_fails_the_call_naming_the_argument() -> None:
    registry = _registry(lambda args, ctx: (ctx.report_progress("bad"), "ok")[1])  # type: ignore[arg-type]
    registry.add_plugin(ProgressRecorder())
    result = registry.execute_sync(ToolExecutionInput("c5", "work"))
    assert result.is_error
    assert "report_progress() done must be a finite number, got 'bad'" in result.text


def test_nothing_is_delivered_after_the_result_from_a_thread_left_running() -> None:
    release = threading.Event()
    finished = threading.Event()

    def body(args: Any, ctx: ToolRunContext) -> str:
        release.wait(5)
        ctx.emit_output("late\n")
        ctx.report_progress(1)
        finished.set()
        return "never seen"

    recorder = ProgressRecorder()
    registry = _registry(body, timeout_ms=20)
    registry.add_plugin(recorder)
    result = registry.execute_sync(ToolExecutionInput("c6", "work"))
    assert result.error.info.code == "TOOL_TIMEOUT"
    release.set()
    assert finished.wait(5)
    assert recorder.events("c6") == []


def _reported_with(plugin: object, call_id: str, caplog: pytest.LogCaptureFixture) -> Any:
    """The events a reporting call delivered with ``plugin`` added (its result unchanged)."""
    recorder = ProgressRecorder()
    registry = _registry(lambda args, ctx: _reporting(ctx))
    registry.add_plugin(plugin)
    registry.add_plugin(recorder)
    with caplog.at_level(logging.WARNING, "dsh_tools"):
        result = registry.execute_sync(ToolExecutionInput(call_id, "work"))
    assert result.text == "finished"
    return recorder


def test_a_listener_that_raises_is_logged_and_the_call_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken:
        @hookimpl
        def dsh_tools_progress(self, event: Any) -> None:
            raise RuntimeError("listener down")

    recorder = _reported_with(Broken(), "c7", caplog)
    assert recorder.output("c7") == "line 1\noops\nline 2\n"
    assert "listener down" in caplog.text


def test_a_redaction_policy_removes_a_secret_from_the_result_and_the_stream() -> None:
    def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.emit_output("password = hun")
        ctx.emit_output("ter2\n")  # split across two writes: coalesced before filtering
        ctx.report_progress(1, 1, "read hunter2")
        return "password = hunter2"

    seen: list[Progress | Output] = []
    registry = _registry(body)
    registry.add_plugin(Redact())
    call = ToolExecutionInput("c8", "work", on_progress=lambda execution, event: seen.append(event))
    result = registry.execute_sync(call)
    assert result.text == "password = ***"
    streamed = "".join(e.text for e in seen if isinstance(e, Output))
    messages = [e.message for e in seen if isinstance(e, Progress)]
    assert "hunter2" not in streamed + str(messages)
    assert streamed == "password = ***\n"
    assert messages == ["read ***"]


def test_a_filter_may_drop_events_and_one_that_fails_withholds_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class DropStderr:
        @hookimpl
        def dsh_tools_progress_filter(self, event: Progress | Output) -> object:
            if isinstance(event, Output) and event.stream == "stderr":
                return DROP
            if isinstance(event, Output) and "line 2" in event.text:
                raise RuntimeError("filter down")
            return None

    recorder = _reported_with(DropStderr(), "c9", caplog)
    assert recorder.output("c9") == "line 1\n"  # stderr dropped; line 2 took the rest down
    assert recorder.progress("c9") == []
    assert "filter down" in caplog.text


def test_async_progress_hooks_are_refused_when_the_plugin_is_added() -> None:
    class AsyncListener:
        @hookimpl
        async def dsh_tools_progress(self, event: Any) -> None:
            return None

    with pytest.raises(Exception, match="dsh_tools_progress is async"):
        ToolRegistry().add_plugin(AsyncListener())


def test_a_million_reports_keep_memory_bounded_and_deliveries_few() -> None:
    progress: list[Progress] = []
    streamed = [0, 0]  # deliveries, characters

    def listener(execution: ToolExecution, event: Progress | Output) -> None:
        if isinstance(event, Progress):
            progress.append(event)
        else:
            streamed[0] += 1
            streamed[1] += len(event.text)

    def body(args: Any, ctx: ToolRunContext) -> str:
        for n in range(1_000_000):
            ctx.report_progress(n, 1_000_000)
            if n % 10 == 0:
                ctx.emit_output("x" * 100)
        return "ok"

    registry = _registry(body)
    call = ToolExecutionInput("c10", "work", on_progress=listener)
    tracemalloc.start()
    try:
        result = registry.execute_sync(call)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.text == "ok"
    assert peak < 4 * 1024 * 1024
    assert progress[-1] == Progress(999_999, 1_000_000)
    # At most one delivery per interval (plus the first and the last), never one per report.
    assert len(progress) < 10_000
    assert streamed[0] < 10_000
    assert [event.done for event in progress] == sorted(event.done for event in progress)


def test_cancelling_a_chatty_body_ends_it_aborted_and_delivers_nothing_after() -> None:
    source = CancelSource()
    after_cancel: list[Progress | Output] = []

    async def body(args: Any, ctx: ToolRunContext) -> str:
        n = 0
        while True:
            n += 1
            ctx.report_progress(n)
            if n == 1000:
                source.cancel()
            await anyio.sleep(0)

    def listener(execution: ToolExecution, event: Progress | Output) -> None:
        if source.cancelled:
            after_cancel.append(event)

    registry = _registry(body)
    call = ToolExecutionInput("c11", "work", signal=source.signal, on_progress=listener)
    result = anyio.run(registry.execute, call)
    assert result.error.info.code == "ABORTED"
    assert after_cancel == []


def test_the_decision_record_keeps_counts_and_the_last_progress() -> None:
    records: list[Any] = []

    class Keep:
        @hookimpl
        def dsh_tools_result(self, record: Any) -> None:
            records.append(record)

    registry = _registry(lambda args, ctx: _reporting(ctx))
    registry.add_plugin(Keep())
    registry.add_plugin(ProgressRecorder())
    registry.execute_sync(ToolExecutionInput("c12", "work"))
    [step] = records[0].of("progress")
    assert step.decision == "streamed"
    detail = step.detail
    assert (detail["progress"], detail["output"], detail["output_chars"]) == (2, 3, 19)
    assert detail["last"] == Progress(2, 2, "done").to_json()
    assert StreamSummary(progress=2).to_json()["last"] is None


def test_output_limit_bounds_each_streamed_batch_with_its_marker() -> None:
    from dsh_tools_plugins.output_limit import OutputLimit

    def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.emit_output("x" * 50 + "\n")
        return "short"

    recorder = ProgressRecorder()
    registry = _registry(body)
    registry.add_plugin(OutputLimit(max_chars=10))
    registry.add_plugin(recorder)
    assert registry.execute_sync(ToolExecutionInput("c13", "work")).text == "short"
    assert recorder.output("c13") == (
        "x" * 10 + "\n[output truncated: showed 10 of 51 characters; "
        "the full text is available to the host]"
    )


def test_the_audit_log_keeps_counts_and_the_filtered_last_progress_without_a_listener(
    tmp_path: Any,
) -> None:
    import json

    from dsh_tools_plugins.audit import AuditLog

    def body(args: Any, ctx: ToolRunContext) -> str:
        for n in range(1, 1001):
            ctx.emit_output(f"{n}\n")
            ctx.report_progress(n, 1000, "read hunter2")
        return "password = hunter2"

    log = tmp_path / "audit.jsonl"
    registry = _registry(body)
    registry.add_plugin(AuditLog(str(log)))
    registry.add_plugin(Redact())
    assert registry.execute_sync(ToolExecutionInput("c14", "work")).text == "password = ***"
    text = log.read_text()
    assert "hunter2" not in text
    [event] = [json.loads(line) for line in text.splitlines() if '"record"' in line]
    [step] = [step for step in event["record"]["steps"] if step["stage"] == "progress"]
    assert step["decision"] == "streamed"
    detail = step["detail"]
    assert (detail["progress"], detail["output"], detail["output_chars"]) == (1000, 1000, 3893)
    assert detail["last"] == {
        "type": "progress",
        "done": 1000,
        "total": 1000,
        "message": "read ***",
    }


def test_a_bridge_that_cannot_send_is_logged_and_the_call_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from dsh_tools._pipeline.relay import Relay

    async def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.report_progress(1, 2, "half")
        await anyio.sleep(0.2)
        return "done"

    async def send(events: list[Progress | Output]) -> None:
        raise anyio.BrokenResourceError  # the client went away

    relay = Relay(send)
    call = ToolExecutionInput("c15", "work", on_progress=relay)
    with caplog.at_level(logging.WARNING, "dsh_tools"):
        result = anyio.run(relay.run, _registry(body).execute(call))
    assert result.text == "done"
    assert "progress for a call could not be sent" in caplog.text


def test_the_call_tool_fixture_keeps_what_a_call_streamed(
    tool_registry: ToolRegistry, call_tool: Any, call_recorder: Any
) -> None:
    tool_registry.register(
        define_tool(
            name="work", description="Work.", parameters={}, execute=lambda a, ctx: _reporting(ctx)
        )
    )
    call_tool("work")
    recorded = call_recorder.last
    assert recorded.output == "line 1\noops\nline 2\n"
    assert recorded.streamed[-1] == Progress(2, 2, "done")
    assert recorded.record.of("progress")[0].decision == "streamed"


def test_a_bridge_that_falls_behind_keeps_the_newest_output_within_a_bound() -> None:
    from dsh_tools._pipeline.relay import MAX_WAITING_CHARS, Relay

    sent: list[Progress | Output] = []

    async def send(events: list[Progress | Output]) -> None:
        sent.extend(events)

    relay = Relay(send)

    async def blocking_the_loop() -> str:  # a body that never lets the relay's task run
        execution: Any = None
        for n in range(10):
            relay(execution, Output(f"{n}" * 100_000))
            relay(execution, Progress(n, 10))
        return "done"

    assert anyio.run(relay.run, blocking_the_loop()) == "done"
    text = "".join(event.text for event in sent if isinstance(event, Output))
    assert len(text) == MAX_WAITING_CHARS
    assert text == "9" * MAX_WAITING_CHARS  # the newest
    assert [event for event in sent if isinstance(event, Progress)] == [Progress(9, 10)]


def test_a_records_only_context_reports_nothing_after_its_dispatch_ended() -> None:
    """No listener, a decision record kept: the call's stream is opened by the first
    report, and a context whose dispatch ended (a wrapper dispatched again) adds nothing."""
    records: list[Any] = []
    contexts: list[ToolRunContext] = []

    class Keep:
        @hookimpl
        def dsh_tools_result(self, record: Any) -> None:
            records.append(record)

    class Twice:
        @hookimpl(wrapper=True)
        def dsh_tools_execute(self, execution: Any) -> Any:
            dispatch = yield

            async def again(signal: Any = None) -> Any:
                await dispatch(signal)
                contexts[0].report_progress(7, 9, "late")
                contexts[0].emit_output("late\n")
                return await dispatch(signal)

            return again

    def body(args: Any, ctx: ToolRunContext) -> str:
        contexts.append(ctx)
        ctx.report_progress(len(contexts), 2, "dispatch")
        return "done"

    registry = _registry(body)
    registry.add_plugin(Keep())
    registry.add_plugin(Twice())
    assert anyio.run(registry.execute, ToolExecutionInput("c16", "work")).text == "done"
    steps = records[0].of("progress")
    assert [step.detail["progress"] for step in steps] == [1, 2]
    assert steps[-1].detail["output"] == 0
    assert steps[-1].detail["last"] == Progress(2, 2, "dispatch").to_json()


@st.composite
def _cut_secrets(draw: st.DrawFn) -> tuple[str, int]:
    """A long unfinished line holding the secret, and where the body's first write ends:
    inside the secret, inside it at the held tail's start, or anywhere."""
    at = draw(st.integers(4097, 9000))
    line = list("x" * at + SECRET + "y" * draw(st.integers(0, 6000)))
    for blank in draw(st.lists(st.integers(0, len(line) - 1), max_size=4)):
        if not at <= blank < at + len(SECRET):
            line[blank] = " "  # a blank is where a cut is tried first
    first = draw(
        st.one_of(
            st.integers(at + 1, at + len(SECRET) - 1),
            st.integers(at + 4097, at + 4096 + len(SECRET) - 1),
            st.integers(1, len(line) - 1),
        )
    )
    return "".join(line), min(first, len(line) - 1)


@settings(max_examples=150, deadline=None)
@given(_cut_secrets())
def test_a_secret_across_any_cut_of_a_long_unfinished_line_is_redacted(
    case: tuple[str, int],
) -> None:
    """A line longer than the longest that waits whole is delivered in pieces; however
    the body's writes and the deliveries cut it, the filter sees the secret whole."""
    line, first = case

    def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.emit_output(line[:first])  # the first report is delivered at once
        ctx.emit_output(line[first:] + "\n")
        return "done"

    seen: list[Output] = []
    registry = _registry(body)
    registry.add_plugin(Redact())
    call = ToolExecutionInput("c", "work", on_progress=lambda execution, event: seen.append(event))
    assert not registry.execute_sync(call).is_error
    streamed = "".join(e.text for e in seen)
    assert streamed == line.replace(SECRET, "***") + "\n"


def _streamed(body: Any, policy: object) -> str:
    seen: list[Output] = []
    registry = _registry(body)
    registry.add_plugin(policy)
    call = ToolExecutionInput("c", "work", on_progress=lambda execution, event: seen.append(event))
    assert not registry.execute_sync(call).is_error
    return "".join(e.text for e in seen)


def test_a_filter_that_cannot_be_cut_withholds_the_head_instead() -> None:
    """A filter that hides a whole event holding a secret gives different text cut than
    whole at every cut: the line's head is withheld (the secret was in it), and the held
    tail, free of it, follows."""

    class HideWhole:
        @hookimpl
        def dsh_tools_progress_filter(self, event: Progress | Output) -> object:
            if isinstance(event, Output) and SECRET in event.text:
                return Output("[withheld]", event.stream)
            return None

    def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.emit_output("x" * 6000 + SECRET + "y" * 5000)
        ctx.emit_output("\n")
        return "done"

    assert _streamed(body, HideWhole()) == "y" * 4096 + "\n"


def test_the_unfinished_line_around_skipped_output_is_skipped_with_it() -> None:
    """Output beyond what may wait is skipped; the part of a line before the skip (which
    may be a secret's head) and after it (its tail) are skipped too."""

    def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.emit_output("first\n")  # delivered at once; the rest waits for the interval
        ctx.emit_output("a" * (64 * 1024 - 10) + SECRET[:3])
        ctx.emit_output(SECRET[3:] + "b" * 70_000)
        ctx.emit_output("c" * 100 + "\nlast\n")
        return "done"

    streamed = _streamed(body, Redact())
    assert SECRET[:3] not in streamed
    assert streamed.startswith("first\n")
    assert "\nlast\n" in streamed
    assert "characters of output skipped while delivering" in streamed
