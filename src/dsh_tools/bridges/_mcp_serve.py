"""The serving side of the MCP bridge: a view's tools as an MCP SDK ``Server``.

Every ``tools/call`` runs through the view's full pipeline, so an MCP client gets exactly
what an in-process host gets. :mod:`dsh_tools.bridges.mcp` is the public import path.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias, cast

from mcp import types as mcp_types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from pydantic import TypeAdapter, ValidationError

from .._content import content_text
from .._json import FrozenDict, thaw
from .._models import ToolDefinition, ToolExecutionInput, ToolExecutionResult, failure_result
from .._pipeline.relay import Relay
from .._registry import ToolRegistry, ToolScope
from .._safetext import safe_text
from .._version import __version__
from ..errors import ErrorCode, RegistrationError
from ..progress import Output, Progress
from ._mcp_approval import ApprovalsMode, McpApprovals, input_required, with_approval_hint
from ._mcp_clients import ClientIdentityError, with_identity_hint
from ._mcp_hints import annotations_of
from ._mcp_ids import unguessable_hex
from .wire import to_mcp_call_result, to_mcp_tools

View: TypeAlias = "ToolRegistry | ToolScope"


def _serving_view(view: View, agent: str | None) -> View:
    """The view whose tools are listed and whose pipeline runs the calls."""
    if not isinstance(view, (ToolRegistry, ToolScope)):
        raise TypeError(
            f"expected a ToolRegistry or ToolScope to serve, got {type(view).__qualname__}"
        )
    if agent is None or agent == view.agent:
        return view
    if isinstance(view, ToolScope):
        raise RegistrationError(
            f"agent={agent!r} conflicts with the served scope {view.agent!r}; "
            "pass the registry with agent=..., or the scope without it"
        )
    target: View = view
    for key in agent.split("/"):
        target = target.scope(key)
    return target


def _object_output_schema(definition: ToolDefinition[Any] | None) -> FrozenDict | None:
    """The declared output schema when MCP can advertise it (root ``type: object``)."""
    if definition is None or definition.output is None:
        return None
    schema = definition.output.schema
    return schema if schema.get("type") == "object" else None


def mcp_tools(view: View) -> list[mcp_types.Tool]:
    """The MCP ``Tool`` list of every tool visible to ``view``.

    ``inputSchema`` is the tool's parameters; ``outputSchema`` is added for tools that
    declare an output whose schema root is ``type: object`` (MCP's structured-content
    contract); other output declarations are not advertised and their values travel as
    content only. ``annotations`` (``readOnlyHint``, ``destructiveHint``,
    ``idempotentHint``, ``openWorldHint``, ``title``) come from the tool's metadata flags
    ``read_only``, ``destructive``, ``idempotent``, ``open_world`` and ``title``; the
    title is the tool's own ``title`` too.
    """
    tools = []
    for declaration in to_mcp_tools(view.schemas()):
        definition = view.get(declaration["name"])
        schema = _object_output_schema(definition)
        if schema is not None:
            declaration["outputSchema"] = thaw(schema)
        annotations = None if definition is None else annotations_of(definition.metadata)
        if annotations is not None:
            declaration["annotations"] = annotations
            if "title" in annotations:  # where clients of 2025-06-18 on look first
                declaration["title"] = annotations["title"]
        tools.append(mcp_types.Tool.model_validate(declaration))
    return tools


_CONTENT_BLOCK: TypeAdapter[mcp_types.ContentBlock] = TypeAdapter(mcp_types.ContentBlock)

CallResult = dict[str, Any]
"""A ``CallToolResult`` in its wire form: the SDK's runner takes a handler's result as a
model or as this dict (``HandlerResult``) and validates it once either way, so the
common answer is not made into models first."""

_RESULT_TYPE = mcp_types.CallToolResult.model_fields["result_type"].default
"""The ``resultType`` of a finished call (the per-request protocol requires it; the
handshake protocol's result drops it)."""


def _content_block(block: Any) -> Any:
    """An MCP content block (as JSON); a block MCP has no type for is sent as its text."""
    if len(block) == 2 and block.get("type") == "text" and type(block.get("text")) is str:
        return block  # most blocks: already MCP's (a frozen mapping is one too)
    try:
        model = _CONTENT_BLOCK.validate_python(thaw(block))
    except ValidationError:
        return {"type": "text", "text": content_text([block])}
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def _call_tool_result(result: ToolExecutionResult, structured: bool) -> CallResult:
    """The MCP answer; ``structured``: the tool advertises an ``outputSchema``.

    Such a tool's success must carry ``structuredContent`` matching it (clients reject one
    without). When a post-execute policy or ``finalize_content`` replaced the content, the
    value is withheld and nothing else may stand in for it, so the answer is sent as an
    error showing the replaced content: never the value the policy kept from the model.
    """
    data: CallResult = {
        "content": [_content_block(block) for block in result.content],
        "isError": result.is_error,
        "resultType": _RESULT_TYPE,
    }
    if structured:
        value = to_mcp_call_result(result).get("structuredContent")
        if value is not None:
            data["structuredContent"] = value
        else:
            data["isError"] = True  # withheld (or a failure, which is one already)
    return data


MAX_MESSAGE_CHARS = 1000
"""The most characters of streamed output one progress notification's message carries
(the newest ones)."""


class _ProgressNotifier:
    """A call's events as ``notifications/progress`` to the client that asked for them
    with a progress token (the SDK sends nothing when the request carried none).

    At most one notification per batch, and ``progress`` always grows, as MCP requires:
    it is the tool's ``done`` when the tool reported a ``total`` (a batch in which it did
    not grow sends nothing, and its output waits for the next one), otherwise the number
    of notifications sent. The message is the newest output (at most
    :data:`MAX_MESSAGE_CHARS`), else the tool's progress message, made safe to show."""

    __slots__ = ("last", "output", "session", "value")

    def __init__(self, session: Any) -> None:
        self.session = session
        self.value = 0.0
        self.output = ""
        self.last: Progress | None = None

    async def send(self, events: list[Progress | Output]) -> None:
        output = "".join(event.text for event in events if isinstance(event, Output))
        self.output = (self.output + output)[-MAX_MESSAGE_CHARS:]
        for event in events:
            if isinstance(event, Progress):
                self.last = event
        last = self.last
        if last is not None and last.total is not None:
            value, total = last.done, last.total
            if value <= self.value:
                return
        else:
            value, total = self.value + 1, None
        text = self.output or (last and last.message)
        self.value, self.output = value, ""
        message = None if not text else safe_text(text, multiline=True)
        await self.session.report_progress(value, total, message)


_PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
_UNSEEN = object()


def _may_want_progress(ctx: ServerRequestContext[Any]) -> bool:
    """Whether the request may want progress; one known not to skips the relay.

    A request that crossed a wire carries a progress token in its ``_meta`` exactly when
    its client wants progress. On the per-request protocol dispatched in-process, the SDK
    hands the client's callback to the request's dispatch context instead
    (:func:`_in_process_callback`)."""
    meta = (ctx.params or {}).get("_meta")
    if isinstance(meta, dict) and meta.get("progressToken") is not None:
        return True
    known = ctx.meta or {}
    if known.get("progress_token") is not None:
        return True
    if _PROTOCOL_VERSION_KEY not in known or ctx.request is not None:
        return False  # the handshake-era protocol, or an HTTP request: the token is all
    return _in_process_callback(ctx) is not None


def _in_process_callback(ctx: ServerRequestContext[Any]) -> object:
    """The progress callback the SDK's in-process dispatch holds for the request
    (``None``: the client gave none). That dispatch context is private to the SDK; this
    reads where SDK 2.x keeps it (the per-request protocol wraps the context in one
    more), and where it is not there (stdio, or another SDK), the answer is "it may have
    one", never "it has none"."""
    dispatch = getattr(ctx.session, "_request_outbound", None)
    dispatch = getattr(dispatch, "_inner", dispatch)
    return getattr(dispatch, "_on_progress", _UNSEEN)


IDEMPOTENCY_KEY = "dsh-tools/idempotency-key"
"""The key of a ``tools/call`` request's ``_meta`` that names the call across retries:
the call journal runs a call of a tool that is not read-only at most once per key."""


def _idempotency_key(params: mcp_types.CallToolRequestParams) -> str | None:
    """The request's ``_meta`` idempotency key, or ``None``; raises ``ValueError`` for
    one that is not a non-empty string."""
    meta = params.meta
    key = meta.get(IDEMPOTENCY_KEY) if isinstance(meta, dict) else None
    if key is None or (isinstance(key, str) and key):
        return key
    raise ValueError(
        f'tool "{params.name}": _meta["{IDEMPOTENCY_KEY}"] must be a non-empty string, got {key!r}'
    )


def _install_approvals(
    view: View, mode: ApprovalsMode, one_client: bool, client: str | None
) -> McpApprovals:
    """Route the registry's asks of MCP calls to their clients (the service it had still
    answers every other call)."""
    registry = view._registry  # the registry's own state, through itself or a scope
    assert isinstance(registry, ToolRegistry)
    approvals = McpApprovals(registry.approval, mode, one_client=one_client, client=client)
    registry.approval = approvals
    return approvals


async def _call_tool(
    target: View,
    asking: McpApprovals,
    ctx: ServerRequestContext[Any],
    params: mcp_types.CallToolRequestParams,
) -> CallResult | mcp_types.InputRequiredResult:
    """One ``tools/call``: run through the pipeline of the scope of the request's client
    under ``target``; a request whose client cannot be told apart runs nothing."""
    try:
        client_view = asking.session_view(target, ctx)
    except ClientIdentityError as error:
        return _call_tool_result(failure_result(str(error), ErrorCode.POLICY_ERROR), False)
    try:
        key = _idempotency_key(params)
    except ValueError as error:
        return _call_tool_result(failure_result(str(error), ErrorCode.INVALID_ARGS), False)
    relay = Relay(_ProgressNotifier(ctx.session).send) if _may_want_progress(ctx) else None
    call = ToolExecutionInput(
        call_id=f"mcp-{unguessable_hex()}",
        name=params.name,
        arguments={} if params.arguments is None else params.arguments,
        agent=client_view.agent,
        on_progress=relay,
        idempotency_key=key,
    )
    with asking.calling(call, ctx, params, client_view) as caller:
        run = client_view.execute(call)
        result = await (run if relay is None else relay.run(run))
    if (asked := input_required(call, caller)) is not None:
        return asked
    if result.is_error:  # a pending ticket's hints; a success needs no look at them
        result = with_approval_hint(result)
        if not asking.clients.lasting(ctx):
            result = with_identity_hint(result)
    structured = _object_output_schema(target.get(params.name)) is not None
    return _call_tool_result(result, structured)


def build_mcp_server(
    view: View,
    *,
    name: str = "dsh-tools",
    agent: str | None = None,
    approvals: ApprovalsMode = "deny",
    one_client: bool = False,
    client: str | None = None,
) -> Server[Any]:
    """An MCP SDK low-level ``Server`` exposing the tools visible to ``view``.

    ``tools/list`` is read from ``view`` on every request, so tools registered later
    appear. ``tools/call`` runs ``await view.execute(...)`` with a fresh call id
    (``mcp-<hex>``), so every call passes the view's policies, guards and timeouts;
    every outcome, unknown tools and invalid arguments included, is a ``CallToolResult``
    with ``isError`` set on failure. ``structuredContent`` carries the tool's value when
    the tool declares an object-rooted output schema and no post-execute policy or
    ``finalize_content`` replaced the content (then it is withheld).

    While a tool runs, what it reports (``ctx.report_progress``, ``ctx.emit_output``,
    after the scope's progress filters) is sent as ``notifications/progress`` when the
    request carries a progress token: a few a second at most, none after the result.

    ``agent`` serves a registry as that agent (``"parent/child"`` for nested scopes):
    tools, guards and plugins are that scope's. A ``ToolScope`` serves as its own agent.
    Each client calls through an agent scope of its own under it (``mcp-<hex>``), so
    remembered answers and tickets never pass from one client to another (how a client
    is known: :mod:`dsh_tools.bridges._mcp_clients`). ``one_client=True`` says every
    request comes from the one client of this server (stdio); ``client`` names that
    client's scope (and implies ``one_client``), so that a server restarted with the same
    ``client`` finds the tickets and remembered answers of the one before.

    An ``Ask`` of a call made over MCP becomes an elicitation when the client supports
    it; otherwise ``approvals`` decides: ``"deny"`` refuses the call, ``"pending"`` ends
    it ``APPROVAL_PENDING`` with a ticket a person answers (``dsh-tools approvals``), and
    the client's same call, repeated, runs once approved. The registry's approval service
    is replaced by one that does this and hands every other call's ask to the service it
    replaced (see :mod:`dsh_tools.bridges._mcp_approval`).
    """
    target = _serving_view(view, agent)
    asking = _install_approvals(target, approvals, one_client, client)

    async def list_tools(
        ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=mcp_tools(target))

    # The runner takes a handler's result as a dict too (HandlerResult); the parameter's
    # type names the models only.
    call_tool = functools.partial(_call_tool, target, asking)
    handler = cast("Callable[..., Awaitable[mcp_types.CallToolResult]]", call_tool)
    return Server(
        name, version=__version__, on_list_tools=list_tools, on_call_tool=handler, **_NOTHING
    )


# It serves tools only; hosts that ask for resources and prompts regardless get empty
# lists, as the official servers answer, rather than "method not found".


async def _no_resources(
    ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
) -> mcp_types.ListResourcesResult:
    return mcp_types.ListResourcesResult(resources=[])


async def _no_resource_templates(
    ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
) -> mcp_types.ListResourceTemplatesResult:
    return mcp_types.ListResourceTemplatesResult(resource_templates=[])


async def _no_prompts(
    ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
) -> mcp_types.ListPromptsResult:
    return mcp_types.ListPromptsResult(prompts=[])


async def serve_stdio(
    view: View,
    *,
    name: str = "dsh-tools",
    agent: str | None = None,
    approvals: ApprovalsMode = "deny",
    client: str | None = None,
) -> None:
    """Serve ``view`` over this process's stdin/stdout until the client disconnects.

    The one client calls through the scope ``client`` names (see
    :func:`build_mcp_server`); give the same one on every start so that an approved
    ticket is found by the next server process. Nothing else may write to stdout
    meanwhile (log to stderr). Synchronous callers:
    ``anyio.run(functools.partial(serve_stdio, registry))``.
    """
    from mcp.server.stdio import stdio_server

    server = build_mcp_server(
        view, name=name, agent=agent, approvals=approvals, one_client=True, client=client
    )
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


_NOTHING: dict[str, Any] = {
    "on_list_resources": _no_resources,
    "on_list_resource_templates": _no_resource_templates,
    "on_list_prompts": _no_prompts,
}
