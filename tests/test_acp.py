"""The ACP bridge: cards as ACP tool calls (checked against the ACP package's schema models),
permission requests, and a real client/agent pair talking over in-memory transports."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from card_strategies import call_views, content_blocks, result_views
from dsh_tools import (
    ApprovalAnswer,
    ApprovalOutcome,
    ApprovalRequest,
    Ask,
    PresentableResult,
    ToolExecutionInput,
    ToolRegistry,
    define_tool,
    failure_result,
    hookimpl,
)
from dsh_tools._json import FrozenDict
from dsh_tools.bridges.acp import (
    ALLOW_ALWAYS,
    ALLOW_ONCE,
    REJECT_ALWAYS,
    REJECT_ONCE,
    AcpApprovalService,
    acp_content,
    acp_tool_call,
    acp_tool_call_update,
    call_view_to_acp,
    client_supports_terminal_output,
    console_text,
    execute_with_acp,
    result_view_to_acp,
)
from dsh_tools.presentation import (
    DiffCallView,
    DiffResultView,
    FileDiff,
    FileLocation,
    GenericCallView,
    GenericResultView,
    ReadFileLine,
    ReadResultView,
    SearchFileMatches,
    SearchMatch,
    SearchMatchesView,
    SearchPathsView,
    TerminalCallView,
    TerminalResultView,
    ToolCallKind,
    WebFetchView,
    WebSearchView,
    WebSource,
)
from strategies import HOSTILE_TEXTS, is_inert

acp = pytest.importorskip("acp")
schema = pytest.importorskip("acp.schema")

CWD = "/home/ada/project"


def _valid_update(update: dict[str, Any]) -> dict[str, Any]:
    """The update parses as an ACP session update of its kind, and nothing was salvaged:
    ACP's models silently drop invalid fields, so the round trip must be exact."""
    notification = schema.SessionNotification.model_validate({"sessionId": "s", "update": update})
    expected = {"tool_call": schema.ToolCallStart, "tool_call_update": schema.ToolCallProgress}
    assert isinstance(notification.update, expected[update["sessionUpdate"]])
    dumped = notification.update.model_dump(mode="json", by_alias=True, exclude_unset=True)
    assert dumped == update
    return update


def _raw(*texts: str) -> PresentableResult:
    return PresentableResult(content=list(texts))


# ---------------------------------------------------------------------- call cards


def test_a_generic_call_card_with_locations() -> None:
    view = GenericCallView(
        f"Read {CWD}/src/app.py",
        kind=ToolCallKind.READ,
        raw_input={"path": "src/app.py"},
        content=["reading"],
        locations=[FileLocation("src/app.py", line=10), FileLocation("/etc/hosts")],
    )
    update = call_view_to_acp("c1", view, raw_input={"path": "ignored"}, cwd=CWD)
    assert _valid_update(update) == {
        "sessionUpdate": "tool_call",
        "toolCallId": "c1",
        "title": "Read src/app.py",
        "kind": "read",
        "content": [{"type": "content", "content": {"type": "text", "text": "reading"}}],
        "status": "pending",
        "locations": [{"path": f"{CWD}/src/app.py", "line": 10}, {"path": "/etc/hosts"}],
        "rawInput": {"path": "src/app.py"},
    }


def test_a_generic_card_without_kind_or_raw_input_uses_other_and_the_arguments() -> None:
    update = call_view_to_acp("c1", GenericCallView(f"ls {CWD}/x"), raw_input={"a": 1}, cwd=CWD)
    # no locations: not a file card, so the title is left alone
    assert _valid_update(update) == {
        "sessionUpdate": "tool_call",
        "toolCallId": "c1",
        "title": f"ls {CWD}/x",
        "kind": "other",
        "status": "pending",
        "rawInput": {"a": 1},
    }


def test_a_diff_call_card_becomes_acp_diff_content_with_absolute_paths() -> None:
    view = DiffCallView(
        f"Edit {CWD}/a.py and {CWD}-old/b.py and /etc/c",
        [
            FileDiff("a.py", "x\n", "y\n"),
            FileDiff("/etc/c", None, "new\n"),
            FileDiff("a.py", "", "z"),
        ],
    )
    update = call_view_to_acp("c2", view, raw_input={"path": "a.py"}, cwd=CWD)
    assert _valid_update(update) == {
        "sessionUpdate": "tool_call",
        "toolCallId": "c2",
        # inside the cwd: relative; a sibling sharing the prefix and /etc: untouched
        "title": f"Edit a.py and {CWD}-old/b.py and /etc/c",
        "kind": "edit",
        "content": [
            {"type": "diff", "path": f"{CWD}/a.py", "oldText": "x\n", "newText": "y\n"},
            {"type": "diff", "path": "/etc/c", "oldText": None, "newText": "new\n"},
            {"type": "diff", "path": f"{CWD}/a.py", "oldText": "", "newText": "z"},
        ],
        "status": "pending",
        "locations": [{"path": f"{CWD}/a.py"}, {"path": "/etc/c"}],
        "rawInput": {"path": "a.py"},
    }


@pytest.mark.parametrize(
    ("cwd", "title", "shown"),
    [
        (None, "Edit /p/a.py", "Edit /p/a.py"),
        ("/p", "Edit /p/a.py", "Edit a.py"),
        ("/p/", "Edit '/p/a.py'", "Edit 'a.py'"),
        ("/p", "Edit /p", "Edit /p"),  # the cwd itself is not a file
        ("/p", "Edit /p/", "Edit /p/"),
        ("/p", "Edit x/p/a.py", "Edit x/p/a.py"),  # not at a path boundary
        ("/", "Edit /a.py", "Edit /a.py"),
        ("relative/cwd", "Edit relative/cwd/a.py", "Edit relative/cwd/a.py"),
        ("C:\\work", "Edit C:\\work\\a.py", "Edit a.py"),
    ],
)
def test_file_card_titles_are_relative_to_the_cwd_only_inside_it(
    cwd: str | None, title: str, shown: str
) -> None:
    update = call_view_to_acp("c", DiffCallView(title, [FileDiff("a.py", None, "")]), cwd=cwd)
    assert update["title"] == shown


def test_relative_paths_resolve_against_a_windows_cwd() -> None:
    update = call_view_to_acp("c", DiffCallView("t", [FileDiff("a.py", None, "")]), cwd="C:\\w")
    assert update["content"][0]["path"] == "C:\\w\\a.py"


def test_a_terminal_call_card_without_the_terminal_convention() -> None:
    view = TerminalCallView("pytest -q", description="Run the tests", cwd="pkg")
    update = call_view_to_acp("c3", view, raw_input={"command": "pytest -q"}, cwd=CWD)
    assert _valid_update(update) == {
        "sessionUpdate": "tool_call",
        "toolCallId": "c3",
        "title": "pytest -q",
        "kind": "execute",
        "content": [{"type": "content", "content": {"type": "text", "text": "Run the tests"}}],
        "status": "pending",
        "rawInput": {"command": "pytest -q"},
    }


@pytest.mark.parametrize(
    ("card_cwd", "expected"),
    [("pkg", f"{CWD}/pkg"), ("/tmp", "/tmp"), (None, CWD)],
)
def test_a_terminal_call_card_with_the_terminal_convention(
    card_cwd: str | None, expected: str
) -> None:
    view = TerminalCallView("make", cwd=card_cwd)
    update = call_view_to_acp("c4", view, cwd=CWD, terminal_output=True)
    assert _valid_update(update) == {
        "sessionUpdate": "tool_call",
        "toolCallId": "c4",
        "title": "make",
        "kind": "execute",
        "_meta": {"terminal_info": {"terminal_id": "c4", "cwd": expected}},
        "content": [{"type": "terminal", "terminalId": "c4"}],
        "status": "pending",
    }


@pytest.mark.parametrize(
    ("sandboxed", "network", "note"),
    [
        (True, False, "[sandboxed, network off]"),
        (True, True, "[sandboxed, network on]"),
        (False, None, "[not sandboxed]"),
    ],
)
@pytest.mark.parametrize("terminal_output", [False, True])
def test_terminal_cards_say_what_the_command_can_reach(
    sandboxed: bool, network: bool | None, note: str, terminal_output: bool
) -> None:
    # A user approving a command in an editor sees whether it runs sandboxed, and online.
    call = TerminalCallView("make", sandboxed=sandboxed, network=network)
    pending = _valid_update(call_view_to_acp("c", call, terminal_output=terminal_output))
    texts = [item["content"]["text"] for item in pending["content"] if item["type"] == "content"]
    assert texts == [note]
    done = TerminalResultView(output="ok\n", exit_code=0, sandboxed=sandboxed, network=network)
    update = _valid_update(
        result_view_to_acp("c", done, _raw("ok"), terminal_output=terminal_output)
    )
    assert update["content"][-1] == {"type": "content", "content": {"type": "text", "text": note}}


# -------------------------------------------------------------------- result cards


def test_no_card_keeps_the_title_and_shows_the_raw_content() -> None:
    update = result_view_to_acp("c", None, _raw("hello"))
    assert _valid_update(update) == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c",
        "status": "completed",
        "content": [{"type": "content", "content": {"type": "text", "text": "hello"}}],
    }


def test_a_failed_result_is_failed() -> None:
    update = result_view_to_acp("c", None, failure_result("no such file", "TOOL_ERROR"))
    assert _valid_update(update)["status"] == "failed"
    assert update["content"][0]["content"]["text"] == "Error: no such file"


def test_a_generic_result_card_replaces_title_and_content() -> None:
    view = GenericResultView(title="3 users", content=["alice, bob, carol"])
    assert _valid_update(result_view_to_acp("c", view, _raw("raw"))) == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c",
        "status": "completed",
        "title": "3 users",
        "content": [{"type": "content", "content": {"type": "text", "text": "alice, bob, carol"}}],
    }
    empty = result_view_to_acp("c", GenericResultView(content=[]), _raw("raw"))
    assert empty["content"] == []
    assert "title" not in result_view_to_acp("c", GenericResultView(), _raw("raw"))


def test_a_diff_result_card_is_diff_content() -> None:
    view = DiffResultView(title=f"Edited {CWD}/a.py", diffs=[FileDiff("a.py", "1\n", "2\n")])
    assert _valid_update(result_view_to_acp("c", view, _raw("ok"), cwd=CWD)) == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c",
        "status": "completed",
        "title": "Edited a.py",
        "content": [{"type": "diff", "path": f"{CWD}/a.py", "oldText": "1\n", "newText": "2\n"}],
    }
    unchanged = result_view_to_acp("c", DiffResultView(diffs=[]), _raw("no changes"))
    assert unchanged["content"][0]["content"]["text"] == "no changes"


def test_a_terminal_result_with_the_terminal_convention() -> None:
    view = TerminalResultView(output="3 passed\n", exit_code=0)
    update = result_view_to_acp("c", view, _raw("ignored"), terminal_output=True)
    assert _valid_update(update) == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c",
        "status": "completed",
        "content": [{"type": "terminal", "terminalId": "c"}],
        "_meta": {
            "terminal_output": {"terminal_id": "c", "data": "3 passed\n"},
            "terminal_exit": {"terminal_id": "c", "exit_code": 0, "signal": None},
        },
    }


def test_a_terminal_result_without_it_is_a_fenced_console_block() -> None:
    view = TerminalResultView(title="pytest", output="3 passed", exit_code=1)
    update = result_view_to_acp("c", view, failure_result("exit 1", "TOOL_ERROR"))
    assert _valid_update(update) == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c",
        "status": "failed",
        "title": "pytest",
        "content": [
            {
                "type": "content",
                "content": {
                    "type": "text",
                    "text": "```console\n3 passed\n```\nExited with code 1",
                },
            }
        ],
    }


@pytest.mark.parametrize(
    ("output", "exit_code", "signal", "text"),
    [
        ("", None, None, "```console\n```"),
        ("a\n", None, "SIGTERM", "```console\na\n```\nKilled by SIGTERM"),
        ("``` x ````", 0, None, "`````console\n``` x ````\n`````\nExited with code 0"),
    ],
)
def test_console_text(output: str, exit_code: int | None, signal: str | None, text: str) -> None:
    assert console_text(output, exit_code, signal) == text


def test_a_terminal_result_without_output_uses_the_raw_text() -> None:
    update = result_view_to_acp("c", TerminalResultView(signal="SIGKILL"), _raw("partial"))
    assert update["content"][0]["content"]["text"] == "```console\npartial\n```\nKilled by SIGKILL"


def test_a_read_card_shows_its_text_and_follows_along() -> None:
    view = ReadResultView(
        "src/app.py",
        title=f"Read {CWD}/src/app.py",
        offset=10,
        lines=[ReadFileLine(10, "def main():")],
        total_lines=40,
        content="def main():",
    )
    assert _valid_update(result_view_to_acp("c", view, _raw("<file>...</file>"), cwd=CWD)) == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c",
        "status": "completed",
        "locations": [{"path": f"{CWD}/src/app.py", "line": 10}],
        "title": "Read src/app.py",
        "content": [{"type": "content", "content": {"type": "text", "text": "def main():"}}],
    }
    bare = ReadResultView("a", offset=1, lines=[ReadFileLine(1, "x")], total_lines=1)
    assert result_view_to_acp("c", bare, _raw("raw"))["content"][0]["content"]["text"] == "raw"
    assert result_view_to_acp("c", bare, _raw())["content"][0]["content"]["text"] == "x"


@pytest.mark.parametrize(
    ("view", "summary"),
    [
        (
            SearchMatchesView(
                [SearchFileMatches("a.py", [SearchMatch(3, "import os")])], truncated=True, total=4
            ),
            "a.py:3: import os\n(3 more not shown)",
        ),
        (SearchPathsView(["a", "b"], truncated=False, total=2), "a\nb"),
        (SearchPathsView([], truncated=False, total=0), "No results"),
        (
            WebSearchView(
                [WebSource("https://x.org", title="X"), WebSource("https://y.org")],
                answer="yes",
                truncated=True,
            ),
            "yes\n- X <https://x.org>\n- <https://y.org>\n(more results not shown)",
        ),
        (
            WebFetchView("https://x.org", status_code=200, truncated=True),
            "https://x.org: HTTP 200 (truncated)",
        ),
    ],
)
def test_search_and_web_cards_fall_back_to_text(view: Any, summary: str) -> None:
    with_raw = _valid_update(result_view_to_acp("c", view, _raw("what the model saw")))
    assert with_raw["content"][0]["content"]["text"] == "what the model saw"
    derived = _valid_update(result_view_to_acp("c", view, _raw()))
    assert derived["content"] == [{"type": "content", "content": {"type": "text", "text": summary}}]


def test_content_blocks_keep_acp_fields_and_anything_else_becomes_text() -> None:
    blocks: list[dict[str, Any]] = [
        {"type": "text", "text": "t", "annotations": {"x": 1}},
        {"type": "image", "data": "aGk=", "mimeType": "image/png"},
        {"type": "audio", "data": "aGk=", "mimeType": "audio/wav"},
        {"type": "resource_link", "name": "n", "uri": "file:///a", "size": 3},
        {
            "type": "resource",
            "resource": {"uri": "file:///a", "text": "x", "mimeType": "text/plain"},
        },
        {"type": "resource", "resource": {"uri": "file:///a"}},
        {"type": "image", "data": "aGk="},
        {"type": "thinking", "thinking": "hmm"},
    ]
    items = acp_content(blocks)
    assert [item["content"] for item in items] == [
        {"type": "text", "text": "t"},
        blocks[1],
        blocks[2],
        blocks[3],
        blocks[4],
        {"type": "text", "text": "[resource content]"},
        {"type": "text", "text": "[image content]"},
        {"type": "text", "text": "[thinking content]"},
    ]
    _valid_update(result_view_to_acp("c", GenericResultView(content=blocks), _raw()))


@given(view=call_views, raw=st.none() | st.dictionaries(st.text(max_size=3), st.integers()))
def test_every_call_card_is_valid_acp(view: Any, raw: Any) -> None:
    for terminal in (False, True):
        _valid_update(
            call_view_to_acp("id", view, raw_input=raw, cwd=CWD, terminal_output=terminal)
        )


@given(view=st.none() | result_views, blocks=content_blocks, failed=st.booleans())
def test_every_result_card_is_valid_acp(view: Any, blocks: Any, failed: bool) -> None:
    result = PresentableResult(content=blocks, is_error=failed)
    for terminal in (False, True):
        update = result_view_to_acp("id", view, result, cwd=CWD, terminal_output=terminal)
        assert _valid_update(update)["status"] == ("failed" if failed else "completed")


def test_the_terminal_capability_is_read_from_the_client_capabilities() -> None:
    model = schema.ClientCapabilities.model_validate({"_meta": {"terminal_output": True}})
    assert client_supports_terminal_output(model)
    assert client_supports_terminal_output({"_meta": {"terminal_output": True}})
    assert not client_supports_terminal_output(schema.ClientCapabilities(terminal=True))
    assert not client_supports_terminal_output({"_meta": {"terminal_output": "yes"}})
    assert not client_supports_terminal_output(None)


# --------------------------------------------------------------- through a registry


def _diffs(args: FrozenDict) -> list[FileDiff]:
    return [FileDiff(str(args["path"]), None, str(args["text"]))]


def _write_registry(**kwargs: Any) -> ToolRegistry:
    registry = ToolRegistry(**kwargs)
    registry.register(
        define_tool(
            name="write",
            description="Write a file",
            parameters={
                "path": {"type": "string", "required": True},
                "text": {"type": "string", "required": True},
            },
            execute=lambda args, ctx: f"wrote {args['path']}",
            present_call=lambda args: DiffCallView(f"Write {args['path']}", _diffs(args)),
            present_result=lambda args, result: (
                None if result.is_error else DiffResultView(diffs=_diffs(args))
            ),
        )
    )
    return registry


def test_registry_calls_map_through_their_presenters() -> None:
    registry = _write_registry()
    call = ToolExecutionInput("w1", "write", {"path": "n.md", "text": "hi"})
    start = _valid_update(acp_tool_call(registry, call, cwd=CWD))
    assert start["title"] == "Write n.md"
    assert start["rawInput"] == {"path": "n.md", "text": "hi"}
    diff = {"type": "diff", "path": f"{CWD}/n.md", "oldText": None, "newText": "hi"}
    assert start["content"] == [diff]
    end = _valid_update(acp_tool_call_update(registry, call, registry.execute_sync(call), cwd=CWD))
    assert end["content"] == [diff]
    assert end["status"] == "completed"
    unknown = ToolExecutionInput("u", "nope", {"x": {1}})  # not JSON, unknown tool
    assert _valid_update(acp_tool_call(registry, unknown)) == {
        "sessionUpdate": "tool_call",
        "toolCallId": "u",
        "title": "nope",
        "kind": "other",
        "status": "pending",
    }


# ------------------------------------------------------------------------ approval


def _request(reason: str | None = "writes a file") -> ApprovalRequest:
    return ApprovalRequest(
        agent="s1",
        tool_name="write",
        call_id="w1",
        arguments=FrozenDict({"path": "n.md", "text": "hi"}),
        reason=reason,
        signal=None,
    )


class _FakeClient:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.requests: list[Any] = []

    async def request_permission(
        self, session_id: str, tool_call: Any, options: Any, **kwargs: Any
    ) -> Any:
        request = schema.RequestPermissionRequest(
            session_id=session_id, tool_call=tool_call, options=options, field_meta=kwargs or None
        )
        self.requests.append(request.model_dump(mode="json", by_alias=True, exclude_none=True))
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


REJECTED = 'the user rejected tool "write"'

OFFERED = [
    {"optionId": ALLOW_ONCE, "name": "Allow once", "kind": "allow_once"},
    {"optionId": ALLOW_ALWAYS, "name": "Always allow this call", "kind": "allow_always"},
    {"optionId": REJECT_ONCE, "name": "Reject", "kind": "reject_once"},
    {"optionId": REJECT_ALWAYS, "name": "Always reject this call", "kind": "reject_always"},
]


def _selected(option: object) -> Any:
    return {"outcome": {"outcome": "selected", "optionId": option}}


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        (_selected(ALLOW_ONCE), ApprovalOutcome.ALLOWED_ONCE),
        (_selected(ALLOW_ALWAYS), ApprovalOutcome.ALLOWED_ALWAYS),
        (_selected(REJECT_ONCE), ApprovalOutcome.REJECTED),
        (_selected(REJECT_ALWAYS), ApprovalOutcome.REJECTED_ALWAYS),
        (_selected("always"), ApprovalOutcome.REJECTED),
        (_selected(["allow-once"]), ApprovalOutcome.REJECTED),
        ({"outcome": {"outcome": "cancelled"}}, ApprovalOutcome.CANCELLED),
        ({"outcome": "yes"}, ApprovalOutcome.UNAVAILABLE),
        (None, ApprovalOutcome.UNAVAILABLE),
        (ConnectionError("client went away"), ApprovalOutcome.UNAVAILABLE),
    ],
)
def test_the_client_answer_maps_to_an_approval_outcome(answer: Any, outcome: Any) -> None:
    client = _FakeClient(answer)
    service = AcpApprovalService(client, "s1")
    assert asyncio.run(service.request(_request())) is outcome
    [sent] = client.requests
    assert sent == {
        "sessionId": "s1",
        "toolCall": {
            "toolCallId": "w1",
            "title": "write",
            "rawInput": {"path": "n.md", "text": "hi"},
        },
        "options": OFFERED,
        "_meta": {"dsh_tools": {"reason": "writes a file"}},
    }


def test_without_remember_only_the_once_options_are_offered_and_accepted() -> None:
    client = _FakeClient(_selected(ALLOW_ALWAYS))
    service = AcpApprovalService(client, "s1", remember=False)
    assert asyncio.run(service.request(_request())) is ApprovalOutcome.REJECTED
    assert client.requests[0]["options"] == [OFFERED[0], OFFERED[2]]


@pytest.mark.parametrize(
    ("choice", "outcome"),
    [
        (ALLOW_ALWAYS, ApprovalAnswer(ApprovalOutcome.ALLOWED_ALWAYS, any_arguments=True)),
        (REJECT_ALWAYS, ApprovalAnswer(ApprovalOutcome.REJECTED_ALWAYS, any_arguments=True)),
        (ALLOW_ONCE, ApprovalOutcome.ALLOWED_ONCE),
    ],
)
def test_always_for_tool_widens_an_always_choice_to_the_tool(choice: str, outcome: Any) -> None:
    client = _FakeClient(_selected(choice))
    service = AcpApprovalService(client, "s1", always_for_tool=True)
    assert asyncio.run(service.request(_request())) == outcome
    names = [option["name"] for option in client.requests[0]["options"]]
    assert names == ["Allow once", "Always allow this tool", "Reject", "Always reject this tool"]


def test_pydantic_answers_are_read_too() -> None:
    answer = schema.RequestPermissionResponse(
        outcome=schema.AllowedOutcome(outcome="selected", option_id=ALLOW_ONCE)
    )
    service = AcpApprovalService(_FakeClient(answer), lambda request: request.agent)
    assert asyncio.run(service.request(_request(None))) is ApprovalOutcome.ALLOWED_ONCE
    cancelled = schema.RequestPermissionResponse(outcome=schema.DeniedOutcome(outcome="cancelled"))
    service = AcpApprovalService(_FakeClient(cancelled), "s1")
    assert asyncio.run(service.request(_request())) is ApprovalOutcome.CANCELLED


def test_a_session_picker_that_fails_means_unavailable() -> None:
    def pick(request: ApprovalRequest) -> str:
        raise KeyError(request.agent)

    client = _FakeClient({"outcome": {"outcome": "cancelled"}})
    service = AcpApprovalService(client, pick)
    assert asyncio.run(service.request(_request())) is ApprovalOutcome.UNAVAILABLE
    assert client.requests == []


def test_with_a_view_the_request_describes_the_card_without_its_content() -> None:
    client = _FakeClient({"outcome": {"outcome": "cancelled"}})
    service = AcpApprovalService(client, "s1", view=_write_registry(), cwd=CWD)
    asyncio.run(service.request(_request(None)))
    [sent] = client.requests
    assert sent["toolCall"] == {
        "toolCallId": "w1",
        "title": "Write n.md",
        "kind": "edit",
        "locations": [{"path": f"{CWD}/n.md"}],
        "rawInput": {"path": "n.md", "text": "hi"},
    }
    assert "_meta" not in sent


# ---------------------------------------------------- a real ACP client/agent pair


class _MemoryTransport:
    """One end of an in-process message pipe (the ACP package's Transport protocol)."""

    def __init__(
        self,
        outbox: asyncio.Queue[dict[str, Any] | None],
        inbox: asyncio.Queue[dict[str, Any] | None],
    ) -> None:
        self.outbox = outbox
        self.inbox = inbox

    async def send(self, message: dict[str, Any]) -> None:
        await self.outbox.put(dict(message))

    async def receive(self) -> dict[str, Any] | None:
        return await self.inbox.get()

    async def close(self) -> None:
        self.outbox.put_nowait(None)


def _transport_pair() -> tuple[_MemoryTransport, _MemoryTransport]:
    a: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    b: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    return _MemoryTransport(a, b), _MemoryTransport(b, a)


class _Editor:
    """The client side: an editor that records updates and answers permission requests."""

    def __init__(self, choice: str | None, events: list[tuple[str, Any]]) -> None:
        self.choice = choice
        self.events = events

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> Any:
        self.events.append(("permission", (session_id, tool_call, options, kwargs)))
        if self.choice is None:
            return schema.RequestPermissionResponse(
                outcome=schema.DeniedOutcome(outcome="cancelled")
            )
        return schema.RequestPermissionResponse(
            outcome=schema.AllowedOutcome(outcome="selected", option_id=self.choice)
        )

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.events.append(("update", update))

    def on_connect(self, conn: Any) -> None:
        pass


class _Host:
    """The agent side: a host whose tools run through a registry that asks before writing."""

    def __init__(self) -> None:
        self.conn: Any = None
        self.results: list[Any] = []
        self.terminal = False
        self.cwd = "/"
        self.registry: ToolRegistry | None = None

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(
        self, protocol_version: int, client_capabilities: Any = None, **kwargs: Any
    ) -> Any:
        self.terminal = client_supports_terminal_output(client_capabilities)
        return schema.InitializeResponse(protocol_version=protocol_version)

    async def new_session(self, cwd: str, **kwargs: Any) -> Any:
        self.cwd = cwd
        return schema.NewSessionResponse(session_id="s1")

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> Any:
        class AskFirst:
            @hookimpl
            def dsh_tools_pre_execute(self, execution: Any) -> Ask:
                return Ask("writes a file")

        registry = self.registry
        if registry is None:  # one registry per session: it remembers "always" answers
            approval = AcpApprovalService(self.conn, session_id, cwd=self.cwd)
            registry = self.registry = _write_registry(approval=approval)
            approval.view = registry
            registry.add_plugin(AskFirst())
        call = ToolExecutionInput("w1", "write", {"path": "n.md", "text": prompt[0].text})
        result = await execute_with_acp(
            registry.scope(session_id),
            call,
            self.conn,
            session_id,
            cwd=self.cwd,
            terminal_output=self.terminal,
        )
        self.results.append(result)
        return schema.PromptResponse(stop_reason="end_turn")


async def _session(choice: str | None, prompts: int = 1) -> tuple[list[tuple[str, Any]], _Host]:
    events: list[tuple[str, Any]] = []
    host = _Host()
    agent_end, client_end = _transport_pair()
    agent_task = asyncio.create_task(acp.run_agent(host, agent_end))
    conn = acp.connect_to_agent(_Editor(choice, events), client_end)
    try:
        await conn.initialize(
            protocol_version=acp.PROTOCOL_VERSION,
            client_capabilities=schema.ClientCapabilities(field_meta={"terminal_output": True}),
        )
        session = await conn.new_session(cwd=CWD, mcp_servers=[])
        for _ in range(prompts):
            response = await conn.prompt(
                session_id=session.session_id,
                prompt=[schema.TextContentBlock(type="text", text="hi")],
            )
            assert response.stop_reason == "end_turn"
    finally:
        await conn.close()
        await asyncio.wait_for(agent_task, timeout=5)
    return events, host


def test_an_editor_approves_a_call_over_acp() -> None:
    events, host = asyncio.run(_session(ALLOW_ONCE))
    assert host.terminal
    assert [kind for kind, _ in events] == ["update", "permission", "update"]
    start, end = events[0][1], events[2][1]
    assert isinstance(start, schema.ToolCallStart)
    assert (start.tool_call_id, start.title, start.kind, start.status) == (
        "w1",
        "Write n.md",
        "edit",
        "pending",
    )
    assert start.content[0].path == f"{CWD}/n.md"
    session_id, tool_call, options, meta = events[1][1]
    assert session_id == "s1"
    assert (tool_call.tool_call_id, tool_call.title, tool_call.content) == (
        "w1",
        "Write n.md",
        None,
    )
    assert [option.kind for option in options] == [
        "allow_once",
        "allow_always",
        "reject_once",
        "reject_always",
    ]
    assert meta == {"dsh_tools": {"reason": "writes a file"}}
    assert isinstance(end, schema.ToolCallProgress)
    assert (end.tool_call_id, end.status) == ("w1", "completed")
    assert end.content[0].new_text == "hi"
    [result] = host.results
    assert result.text == "wrote n.md"


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        (REJECT_ONCE, 'the user rejected tool "write"'),
        (None, 'approval for tool "write" was cancelled'),
    ],
)
def test_an_editor_that_refuses_denies_the_call(choice: str | None, message: str) -> None:
    events, host = asyncio.run(_session(choice))
    [result] = host.results
    assert result.is_error
    assert result.error.message == message
    end = events[-1][1]
    assert end.status == "failed"
    # the presenter gives no card for a failure: the error text replaces the diff
    assert [item.content.text for item in end.content] == [f"Error: {message}"]


@pytest.mark.parametrize(
    ("choice", "asked", "texts"),
    [
        (ALLOW_ALWAYS, 1, ["wrote n.md", "wrote n.md"]),
        (ALLOW_ONCE, 2, ["wrote n.md", "wrote n.md"]),
        (REJECT_ALWAYS, 1, ["Error: " + REJECTED, "Error: " + REJECTED + " (a remembered answer)"]),
    ],
)
def test_an_always_choice_in_the_editor_is_remembered_for_the_session(
    choice: str, asked: int, texts: list[str]
) -> None:
    events, host = asyncio.run(_session(choice, prompts=2))
    assert [kind for kind, _ in events].count("permission") == asked
    assert [result.text for result in host.results] == texts


# --------------------------------------------------------------------- import hygiene


def test_importing_dsh_tools_imports_neither_the_bridge_nor_the_acp_package() -> None:
    code = (
        "import sys, dsh_tools;"
        "assert 'dsh_tools.bridges.acp' not in sys.modules;"
        "import dsh_tools.bridges.acp;"
        "assert 'acp' not in sys.modules"  # the mapping needs no ACP package
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------- text an editor shows


def _shown(update: dict[str, Any]) -> list[tuple[str, bool]]:
    """Every text of an update an editor shows, with whether it may hold lines."""
    shown = [(update["title"], False)] if "title" in update else []
    for item in update.get("content", []):
        block = item.get("content", {})
        shown.extend(
            (block[key], key == "text") for key in ("text", "name", "title") if key in block
        )
        if "text" in block.get("resource", {}):
            shown.append((block["resource"]["text"], True))
    output = update.get("_meta", {}).get("terminal_output")
    if output is not None:
        shown.append((output["data"], True))
    return shown


@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_every_text_an_editor_shows_is_inert(text: str) -> None:
    calls = [
        TerminalCallView(text, description=text),
        GenericCallView(text, locations=[FileLocation("a.txt")]),
        DiffCallView(text, [FileDiff("a.txt", None, "x\n")]),
    ]
    blocks = [
        {"type": "text", "text": text},
        {"type": "resource_link", "name": text, "uri": "file:///a", "title": text},
        {"type": "resource", "resource": {"uri": "file:///a", "text": text}},
    ]
    results = [
        TerminalResultView(title=text, output=text, exit_code=0),
        GenericResultView(title=text, content=blocks),
        SearchPathsView([text], truncated=False, total=1),
        None,
    ]
    updates = [
        call_view_to_acp("c", view, cwd=CWD, terminal_output=terminal)
        for view in calls
        for terminal in (False, True)
    ] + [
        result_view_to_acp("c", view, _raw(text), cwd=CWD, terminal_output=terminal)
        for view in results
        for terminal in (False, True)
    ]
    for update in updates:
        _valid_update(update)
        for shown, lines in _shown(update):
            assert is_inert(shown, multiline=lines), update
    assert updates[0]["title"].count("\\") > text.count("\\")  # shown as escapes


@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_a_permission_request_shows_the_command_and_reason_inert(text: str) -> None:
    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="run",
            description="Run a command.",
            parameters={"command": {"type": "string", "required": True}},
            execute=lambda args, ctx: "",
            present_call=lambda args: TerminalCallView(args["command"]),
        )
    )
    request = ApprovalRequest(
        agent="s1",
        tool_name="run",
        call_id="r1",
        arguments=FrozenDict({"command": text}),
        reason=text,
        signal=None,
    )
    for view in (registry, None):
        client = _FakeClient({"outcome": {"outcome": "cancelled"}})
        asyncio.run(AcpApprovalService(client, "s1", view=view).request(request))
        [sent] = client.requests
        assert is_inert(sent["toolCall"]["title"])
        assert is_inert(sent["_meta"]["dsh_tools"]["reason"])
        assert sent["toolCall"]["rawInput"] == {"command": text}  # data, exactly as sent


@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_a_search_summary_shows_one_line_per_path_or_match(text: str) -> None:
    matches = SearchMatchesView(
        [SearchFileMatches(text, [SearchMatch(1, text)])], truncated=False, total=1
    )
    paths = SearchPathsView([text, "b.py"], truncated=False, total=2)
    for view, lines in ((matches, 1), (paths, 2)):
        update = result_view_to_acp("c", view, _raw())
        [item] = update["content"]
        shown = item["content"]["text"]
        assert is_inert(shown, multiline=True)
        assert len(shown.splitlines()) == lines, shown
