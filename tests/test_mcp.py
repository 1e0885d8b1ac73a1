"""The MCP bridge, tested with the official SDK's own client and server.

Serving: the SDK ``Client`` connects in-process to :func:`build_mcp_server` (its default
direct dispatch and, where framing matters, ``mode="legacy"`` JSON-RPC over memory
streams), over stdio to a subprocess running :func:`serve_stdio`, and over streamable
HTTP to :func:`serve_http`. Consuming: remote tools registered from SDK servers run
behind local policies, and a server killed mid-call gives a prompt failure.
"""

from __future__ import annotations

import base64
import functools
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters
from mcp import types as mcp_types
from mcp.server.lowlevel import Server

from dsh_tools import ToolRegistry, define_tool
from dsh_tools._content import ImageContent, TextContent
from dsh_tools._models import (
    Accept,
    Deny,
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolExecutionSuccess,
    ToolOutput,
)
from dsh_tools.bridges.mcp import (
    McpConnectionError,
    McpToolSource,
    build_mcp_server,
    load_mcp_tools,
    mcp_tools,
    register_mcp_server,
    serve_http,
)
from dsh_tools.errors import RegistrationError
from dsh_tools.hookspecs import hookimpl

SERVERS = Path(__file__).parent / "fixtures" / "mcp_servers"
STDIO_SERVER = SERVERS / "dsh_stdio_server.py"
PIXEL = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()
SUM_SCHEMA = {"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]}


def calc_registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="add",
            description="Add two integers.",
            parameters={
                "a": {"type": "integer", "required": True},
                "b": {"type": "integer", "required": True},
            },
            execute=lambda args, ctx: {"sum": args["a"] + args["b"]},
            output=ToolOutput(
                schema=SUM_SCHEMA, render=lambda args, value: f"sum is {value['sum']}"
            ),
        )
    )
    registry.register(
        define_tool(
            name="pair",
            description="A list-rooted output: advertised without outputSchema.",
            parameters={},
            execute=lambda args, ctx: [1, 2],
            output=ToolOutput(
                schema={"type": "array", "items": {"type": "integer"}},
                render=lambda args, value: "one and two",
            ),
        )
    )
    registry.register(
        define_tool(
            name="info",
            description="Returns a dict without declaring an output.",
            parameters={"text": {"type": "string"}},
            execute=lambda args, ctx: {"echo": args.get("text", "")},
        )
    )

    def crash(args: Any, ctx: Any) -> str:
        raise RuntimeError("disk on fire")

    registry.register(
        define_tool(name="crash", description="Always raises.", parameters={}, execute=crash)
    )
    return registry


def success(result: ToolExecutionResult) -> ToolExecutionSuccess:
    assert isinstance(result, ToolExecutionSuccess), result
    return result


def failure(result: ToolExecutionResult) -> ToolExecutionFailure:
    assert isinstance(result, ToolExecutionFailure), result
    return result


def call(name: str, arguments: dict[str, Any] | None = None) -> ToolExecutionInput:
    return ToolExecutionInput(call_id="c1", name=name, arguments=arguments or {})


def texts(result: mcp_types.CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, mcp_types.TextContent)]


def test_importing_dsh_tools_does_not_import_the_sdk() -> None:
    import subprocess

    code = "import sys, dsh_tools, dsh_tools.bridges; print('mcp' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    )
    assert done.stdout.strip() == "False"


# =========================================================================== serve


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_tools_list_advertises_object_rooted_output_schemas_only(mode: str) -> None:
    with anyio.fail_after(5):
        async with Client(build_mcp_server(calc_registry()), mode=mode) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert list(listed) == ["add", "pair", "info", "crash"]
    assert listed["add"].description == "Add two integers."
    assert listed["add"].input_schema == {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }
    assert listed["add"].output_schema == SUM_SCHEMA
    assert listed["pair"].output_schema is None
    assert listed["info"].output_schema is None


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_tools_call_runs_the_pipeline_and_returns_structured_content(mode: str) -> None:
    with anyio.fail_after(5):
        async with Client(build_mcp_server(calc_registry()), mode=mode) as client:
            added = await client.call_tool("add", {"a": 2, "b": 3})
            pair = await client.call_tool("pair", {})
            info = await client.call_tool("info", {"text": "hi"})
    assert (added.is_error, texts(added), added.structured_content) == (
        False,
        ["sum is 5"],
        {"sum": 5},
    )
    # Not object-rooted, or no output declared: the value travels as content only.
    assert (pair.is_error, texts(pair), pair.structured_content) == (False, ["one and two"], None)
    assert (info.is_error, texts(info), info.structured_content) == (
        False,
        ['{"echo":"hi"}'],
        None,
    )


@pytest.mark.anyio
async def test_every_failure_is_an_is_error_result_never_a_protocol_error() -> None:
    registry = calc_registry()
    registry.guard(
        lambda execution: "no 13" if (execution.arguments or {}).get("a") == 13 else None
    )

    class NoInfo:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> Deny | None:
            return Deny("info is off today") if execution.name == "info" else None

    registry.add_plugin(NoInfo())
    with anyio.fail_after(5):
        async with Client(build_mcp_server(registry)) as client:
            results = {
                "unknown": await client.call_tool("nope", {}),
                "invalid": await client.call_tool("add", {"a": "1"}),
                "guard": await client.call_tool("add", {"a": 13, "b": 0}),
                "policy": await client.call_tool("info", {}),
                "crash": await client.call_tool("crash", {}),
            }
    outcomes = {key: (r.is_error, r.structured_content) for key, r in results.items()}
    assert outcomes == dict.fromkeys(results, (True, None))
    assert texts(results["unknown"]) == ['Error: unknown tool "nope"']
    assert texts(results["invalid"]) == [
        'Error: invalid arguments: missing required property "b"; "a" must be an integer'
    ]
    assert texts(results["guard"]) == ["Error: no 13"]
    assert texts(results["policy"]) == ["Error: info is off today"]
    assert texts(results["crash"]) == ["Error: disk on fire"]


@pytest.mark.anyio
async def test_each_call_gets_a_fresh_call_id_and_a_scope_of_the_served_one_as_agent() -> None:
    registry = calc_registry()
    seen: list[tuple[str, str | None]] = []

    class Recorder:
        @hookimpl
        def dsh_tools_result(self, execution: ToolExecution, result: ToolExecutionResult) -> None:
            seen.append((execution.call_id, execution.agent))

    registry.add_plugin(Recorder())
    with anyio.fail_after(5):
        async with Client(build_mcp_server(registry, agent="team/bot")) as client:
            await client.call_tool("add", {"a": 1, "b": 1})
            await client.call_tool("add", {"a": 1, "b": 1})
    # Each client connection is an agent of its own under the served scope.
    assert all(agent and agent.startswith("team/bot/mcp-") for _, agent in seen)
    ids = [call_id for call_id, _ in seen]
    assert ids[0] != ids[1]
    assert all(call_id.startswith("mcp-") for call_id in ids)


@pytest.mark.anyio
async def test_a_scope_serves_its_own_view_and_later_registrations_appear() -> None:
    registry = calc_registry()
    scope = registry.scope("agent")
    scope.restrict(allow=["add"])
    with anyio.fail_after(5):
        async with Client(build_mcp_server(scope)) as client:
            before = [tool.name for tool in (await client.list_tools(cache_mode="bypass")).tools]
            scope.register(
                define_tool(
                    name="mine", description="Scoped.", parameters={}, execute=lambda a, c: "ok"
                )
            )
            after = [tool.name for tool in (await client.list_tools(cache_mode="bypass")).tools]
            hidden = await client.call_tool("crash", {})
    assert before == ["add"]
    assert after == ["add", "mine"]
    assert texts(hidden) == ['Error: unknown tool "crash"']


def test_agent_must_match_a_served_scope() -> None:
    scope = calc_registry().scope("a")
    assert build_mcp_server(scope, agent="a") is not None
    with pytest.raises(RegistrationError, match="conflicts with the served scope 'a'"):
        build_mcp_server(scope, agent="b")
    with pytest.raises(TypeError, match="expected a ToolRegistry or ToolScope"):
        build_mcp_server(object())  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_images_pass_through_and_unknown_blocks_become_text() -> None:
    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="shot",
            description="A screenshot.",
            parameters={},
            execute=lambda args, ctx: [TextContent("here"), ImageContent(PIXEL, "image/png")],
            finalize_content=lambda execution, result: (
                [*result.content, {"type": "diff", "path": "a.py"}]
            ),
        )
    )
    with anyio.fail_after(5):
        async with Client(build_mcp_server(registry), mode="legacy") as client:
            result = await client.call_tool("shot", {})
    text, image, diff = result.content
    assert isinstance(text, mcp_types.TextContent)
    assert isinstance(image, mcp_types.ImageContent)
    assert (image.data, image.mime_type) == (PIXEL, "image/png")
    assert isinstance(diff, mcp_types.TextContent)
    assert diff.text == "[diff content]"


def test_mcp_tools_is_the_tools_list_payload() -> None:
    tools = mcp_tools(calc_registry())
    assert [tool.name for tool in tools] == ["add", "pair", "info", "crash"]
    assert tools[0].model_dump(by_alias=True, exclude_none=True)["outputSchema"] == SUM_SCHEMA


# =========================================================================== consume


def remote_server(calls: list[str]) -> Server[Any]:
    """A plain SDK server (no dsh-tools inside) with every content kind MCP has."""
    tools = [
        mcp_types.Tool(
            name="weather",
            description="Weather for a city.",
            input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
            output_schema={
                "type": "object",
                "properties": {"celsius": {"type": "number"}},
                "required": ["celsius"],
            },
        ),
        mcp_types.Tool(
            name="odd_schema",
            title="Odd schema",
            input_schema={"type": "object"},
            output_schema={"type": "object", "anyOf": [{"required": ["x"]}]},
        ),
        mcp_types.Tool(name="media", input_schema={"type": "object"}),
        mcp_types.Tool(name="broken", input_schema={"type": "object"}),
        mcp_types.Tool(name="slow", input_schema={"type": "object"}),
    ]

    async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: mcp_types.CallToolRequestParams) -> Any:
        calls.append(params.name)
        if params.name == "weather":
            city = (params.arguments or {}).get("city", "?")
            return mcp_types.CallToolResult(
                content=[mcp_types.TextContent(text=f"{city}: mild")],
                structured_content={"celsius": 18.5},
            )
        if params.name == "odd_schema":
            return mcp_types.CallToolResult(
                content=[mcp_types.TextContent(text="x marks")], structured_content={"x": 1}
            )
        if params.name == "media":
            return mcp_types.CallToolResult(
                content=[
                    mcp_types.ImageContent(data=PIXEL, mime_type="image/png"),
                    mcp_types.AudioContent(data="AAAA", mime_type="audio/wav"),
                    mcp_types.ResourceLink(name="log", uri="file:///tmp/log.txt"),
                    mcp_types.EmbeddedResource(
                        resource=mcp_types.TextResourceContents(uri="mem://a", text="inline text")
                    ),
                ]
            )
        if params.name == "broken":
            return mcp_types.CallToolResult(
                content=[mcp_types.TextContent(text="Error: quota exceeded")], is_error=True
            )
        await anyio.sleep(30)
        return mcp_types.CallToolResult(content=[])

    return Server("remote", on_list_tools=list_tools, on_call_tool=call_tool)


@pytest.mark.anyio
async def test_remote_tools_run_behind_local_guards_and_keep_structured_values() -> None:
    calls: list[str] = []
    local = ToolRegistry()
    local.guard(lambda execution: "not Paris" if execution.arguments == {"city": "Paris"} else None)
    with anyio.fail_after(5):
        async with McpToolSource(remote_server(calls), prefix="r_") as source:
            source.register(local)
            assert local.names() == ["r_weather", "r_odd_schema", "r_media", "r_broken", "r_slow"]
            weather = success(await local.execute(call("r_weather", {"city": "Oslo"})))
            denied = failure(await local.execute(call("r_weather", {"city": "Paris"})))
    assert weather.value == {"celsius": 18.5}
    assert weather.text == "Oslo: mild"
    assert (denied.code, denied.text) == ("DENIED", "Error: not Paris")
    assert calls == ["weather"]  # the denied call never reached the server
    assert local.names() == []  # leaving the source removed its registrations


@pytest.mark.anyio
async def test_output_schemas_outside_the_subset_are_noted_not_declared() -> None:
    local = ToolRegistry()
    with anyio.fail_after(5):
        async with McpToolSource(remote_server([])) as source:
            notes = {tool.name: tool.output_note for tool in source.tools}
            outputs = {tool.name: tool.definition.output for tool in source.tools}
            source.register(local)
            odd = success(await local.execute(call("odd_schema")))
    assert notes["weather"] is None
    assert outputs["weather"] is not None
    assert outputs["odd_schema"] is None
    assert notes["odd_schema"] is not None
    assert notes["odd_schema"].startswith("outputSchema not declared")
    assert "anyOf" in notes["odd_schema"]
    assert (odd.text, odd.value) == ("x marks", [{"type": "text", "text": "x marks"}])
    assert local.get("odd_schema") is None
    assert [t.definition.description for t in source.tools][:2] == [
        "Weather for a city.",
        "Odd schema",
    ]


@pytest.mark.anyio
async def test_remote_content_maps_to_our_blocks_and_errors_to_failures() -> None:
    local = ToolRegistry()
    with anyio.fail_after(5):
        async with McpToolSource(remote_server([])) as source:
            source.register(local)
            media = success(await local.execute(call("media")))
            broken = failure(await local.execute(call("broken")))
    assert list(media.content) == [
        {"type": "image", "data": PIXEL, "mimeType": "image/png"},
        {"type": "text", "text": "[audio (audio/wav): 4 base64 chars omitted]"},
        {"type": "text", "text": "[resource link log <file:///tmp/log.txt>]"},
        {"type": "text", "text": "inline text"},
    ]
    assert broken.error.info.name == "McpToolError"
    assert (broken.code, broken.text) == ("TOOL_ERROR", "Error: quota exceeded")


@pytest.mark.anyio
async def test_a_replaced_value_is_rendered_as_json_text() -> None:
    local = ToolRegistry()

    class Colder:
        @hookimpl
        def dsh_tools_post_execute(
            self, execution: ToolExecution, result: ToolExecutionResult
        ) -> Accept:
            return Accept(value={"celsius": -1})

    local.add_plugin(Colder())
    with anyio.fail_after(5):
        async with McpToolSource(remote_server([])) as source:
            source.register(local)
            result = success(await local.execute(call("weather", {"city": "Oslo"})))
    assert (result.value, result.text) == ({"celsius": -1}, '{"celsius":-1}')


@pytest.mark.anyio
async def test_timeout_ms_bounds_a_remote_call() -> None:
    local = ToolRegistry()
    with anyio.fail_after(5):
        async with McpToolSource(remote_server([]), timeout_ms=100) as source:
            source.register(local)
            result = failure(await local.execute(call("slow")))
            # Under a timeout the structured value keeps the server's content too.
            weather = success(await local.execute(call("weather", {"city": "Oslo"})))
    assert (weather.value, weather.text) == ({"celsius": 18.5}, "Oslo: mild")
    assert result.code == "TOOL_TIMEOUT"
    assert result.text == 'Error: tool "slow" timed out after 100 ms'


@pytest.mark.anyio
async def test_register_mcp_server_is_all_or_nothing_and_uses_your_client() -> None:
    local = ToolRegistry()
    local.register(
        define_tool(name="media", description="Taken.", parameters={}, execute=lambda a, c: "")
    )
    with anyio.fail_after(5):
        async with Client(remote_server([])) as client:
            with pytest.raises(RegistrationError, match='"media" is already registered'):
                await register_mcp_server(local, client)
            assert local.names() == ["media"]
            dispose = await register_mcp_server(local, client.session, prefix="x.")
            assert len(local.names()) == 6
            dispose()
            assert local.names() == ["media"]
        with pytest.raises(TypeError, match=r"expected a connected mcp\.Client"):
            await load_mcp_tools(object())  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_tools_list_is_read_page_by_page() -> None:
    async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        page = int(params.cursor) if params is not None and params.cursor else 0
        return mcp_types.ListToolsResult(
            tools=[mcp_types.Tool(name=f"t{page}", input_schema={"type": "object"})],
            next_cursor=str(page + 1) if page < 2 else None,
        )

    server: Server[Any] = Server("paged", on_list_tools=list_tools)
    with anyio.fail_after(5):
        async with Client(server, mode="legacy") as client:
            via_client = [tool.name for tool in await load_mcp_tools(client)]
            via_session = [tool.name for tool in await load_mcp_tools(client.session)]
    assert via_client == via_session == ["t0", "t1", "t2"]


@pytest.mark.anyio
@pytest.mark.parametrize("through", ["client", "session"])
async def test_calls_after_the_client_closed_fail_cleanly(through: str) -> None:
    local = ToolRegistry()
    with anyio.fail_after(5):
        async with Client(remote_server([]), mode="legacy") as client:
            await register_mcp_server(local, client if through == "client" else client.session)
        result = failure(await local.execute(call("weather", {"city": "Oslo"})))
    assert result.error.info.name == "McpConnectionError", result.text
    assert "weather" in result.text


def test_the_source_must_be_entered() -> None:
    source = McpToolSource("http://127.0.0.1:9/mcp")
    with pytest.raises(RuntimeError, match="not connected"):
        source.register(ToolRegistry())


# =========================================================================== processes


def stdio_params() -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[str(STDIO_SERVER)])


@pytest.mark.anyio
async def test_stdio_subprocess_serves_the_pipeline_and_dies_without_hanging_us() -> None:
    local = ToolRegistry()
    with anyio.fail_after(15):
        async with McpToolSource(stdio_params()) as source:
            source.register(local)
            assert local.names() == ["add", "pid", "slow"]
            added = success(await local.execute(call("add", {"a": 1, "b": 2})))
            refused = failure(await local.execute(call("add", {"a": 13, "b": 2})))
            pid = int(success(await local.execute(call("pid"))).text)

            async def kill_soon() -> None:
                await anyio.sleep(0.3)
                os.kill(pid, signal.SIGKILL)

            async with anyio.create_task_group() as group:
                group.start_soon(kill_soon)
                with anyio.fail_after(5):
                    started = anyio.current_time()
                    killed = failure(await local.execute(call("slow", {"seconds": 60})))
                    elapsed = anyio.current_time() - started
            after = failure(await local.execute(call("add", {"a": 1, "b": 2})))
    assert (added.value, added.text) == ({"sum": 3}, "the sum is 3")
    assert refused.text == "Error: the server refuses 13"  # the server's own guard
    assert killed.error.info.name == "McpConnectionError"
    assert killed.text == (
        'Error: the connection to the MCP server closed; tool "slow" got no result'
    )
    assert elapsed < 3
    assert after.error.info.name == "McpConnectionError"


@pytest.mark.anyio
async def test_a_server_that_will_not_start_is_a_clear_connection_error() -> None:
    params = StdioServerParameters(command=sys.executable, args=["-c", "raise SystemExit(3)"])
    with anyio.fail_after(10), pytest.raises(McpConnectionError, match="could not connect"):
        async with McpToolSource(params):
            pass  # pragma: no cover


@pytest.fixture
def asyncio_only(anyio_backend: str) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("serve_http runs uvicorn, which needs asyncio")


@pytest.fixture
async def http_url(asyncio_only: None) -> AsyncIterator[str]:
    async with anyio.create_task_group() as group:
        url = await group.start(functools.partial(serve_http, calc_registry(), port=0))
        yield url
        group.cancel_scope.cancel()


@pytest.mark.anyio
async def test_serve_http_round_trip(http_url: str) -> None:
    local = ToolRegistry()
    assert http_url.startswith("http://127.0.0.1:")
    assert http_url.endswith("/mcp")
    with anyio.fail_after(10):
        async with McpToolSource(http_url, prefix="web_") as source:
            source.register(local)
            added = success(await local.execute(call("web_add", {"a": 40, "b": 2})))
    assert (added.value, added.text) == ({"sum": 42}, "sum is 42")


@pytest.mark.anyio
async def test_serve_http_refuses_foreign_host_headers(http_url: str) -> None:
    import httpx2 as httpx

    payload = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    headers = {"Host": "evil.example", "Accept": "application/json, text/event-stream"}
    with anyio.fail_after(10):
        async with httpx.AsyncClient() as http:
            response = await http.post(http_url, json=payload, headers=headers)
    assert response.status_code in {403, 421}


@pytest.mark.anyio
@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1", "example.com"])
async def test_serve_http_refuses_non_loopback_hosts(host: str) -> None:
    with pytest.raises(ValueError, match="refuses to listen on non-loopback host"):
        await serve_http(ToolRegistry(), host=host)


@pytest.mark.anyio
async def test_resources_and_prompts_are_empty_lists_not_unknown_methods() -> None:
    """Some MCP hosts ask every server for its resources and prompts; a server of tools
    answers with empty lists, as the official servers do."""
    with anyio.fail_after(5):
        async with Client(build_mcp_server(ToolRegistry())) as client:
            assert (await client.list_resources()).resources == []
            assert (await client.list_resource_templates()).resource_templates == []
            assert (await client.list_prompts()).prompts == []


@pytest.mark.anyio
async def test_a_request_s_idempotency_key_makes_a_retry_replay_the_first_result() -> None:
    registry = ToolRegistry()
    ran: list[str] = []

    def charge(args: Any, ctx: Any) -> str:
        ran.append(ctx.idempotency_key)
        return f"charged {args['cents']}"

    parameters = {"cents": {"type": "integer", "required": True}}
    registry.register(
        define_tool(name="charge", description="Charge.", parameters=parameters, execute=charge)
    )
    key = {"dsh-tools/idempotency-key": "order-1"}
    with anyio.fail_after(5):
        async with Client(build_mcp_server(registry)) as client:
            first = await client.call_tool("charge", {"cents": 5}, meta=key)  # type: ignore[arg-type]
            retry = await client.call_tool("charge", {"cents": 5}, meta=key)  # type: ignore[arg-type]
            other = await client.call_tool("charge", {"cents": 7}, meta=key)  # type: ignore[arg-type]
            bad = await client.call_tool(
                "charge", {"cents": 5}, meta={"dsh-tools/idempotency-key": 3}
            )  # type: ignore[arg-type]
            plain = await client.call_tool("charge", {"cents": 5})
    assert texts(first) == texts(retry) == ["charged 5"]
    assert ran[0] == "order-1"
    assert len(ran) == 2
    assert other.is_error
    assert "idempotency key 'order-1'" in texts(other)[0]
    assert bad.is_error
    assert '_meta["dsh-tools/idempotency-key"] must be' in texts(bad)[0]
    assert not plain.is_error
