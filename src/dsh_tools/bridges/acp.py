"""The Agent Client Protocol (ACP) bridge: cards as editor tool calls, ``Ask`` as a dialog.

A host that speaks ACP to an editor (Zed, JetBrains, Neovim plugins ...) shows each tool
call as an ACP *tool call*: a ``tool_call`` session update when the call starts and a
``tool_call_update`` when it ends. This module turns the provider-neutral cards of
:mod:`dsh_tools.presentation` into those updates, as plain JSON (camelCase keys, ``None``
never written), and answers ``Ask`` decisions with ACP's ``session/request_permission``.

The mapping itself needs no ACP package: every function returns plain ``dict`` data that
a connection of the ``agent-client-protocol`` package (the ``acp`` extra:
``pip install '.[acp]'`` in a clone of dsh-tools) accepts where it takes a schema model,
and :class:`AcpApprovalService` / :func:`execute_with_acp` only call methods on the
connection they are given. Importing
``dsh_tools`` never imports this module.

How each card maps:

* ``generic``: title, ``kind`` (``other`` when absent), content blocks as ACP ``content``
  items, ``locations``; ``rawInput`` is the card's salient input, or the call's arguments.
* ``diff``: each :class:`~dsh_tools.presentation.FileDiff` becomes ACP diff content
  ``{"type": "diff", "path", "oldText", "newText"}``; ``kind`` is ``edit``.
* ``terminal``: ACP has no terminal card that a tool can fill on its own (its ``terminal``
  content embeds a terminal the *client* created with ``terminal/create``). Clients that
  advertise the ``_meta.terminal_output`` client capability (see
  :func:`client_supports_terminal_output`) get the ``_meta`` terminal convention: the
  content is ``{"type": "terminal", "terminalId": <tool call id>}`` and ``_meta`` carries
  ``terminal_info`` (``terminal_id``, ``cwd``) on the call, ``terminal_output``
  (``terminal_id``, ``data``) and ``terminal_exit`` (``terminal_id``, ``exit_code``,
  ``signal``) on the result. Every other client gets one text block: the output in a
  ```` ```console```` fence (longer when the output holds a fence) followed by
  ``Exited with code N`` or ``Killed by SIGNAL``.
* ``search``, ``read``, ``web``: ACP has no such cards, so they show text: the raw result
  content (what the model saw; a ``read`` card's own ``content`` when it has one), or a
  summary derived from the card when that content is empty. A ``read`` card also sets the
  location ``(path, offset)`` so a client can follow along.
* No card (``None``): the raw result content, and the pending title stays.

Paths: ACP wants absolute paths in ``locations`` and diff content (clients open them), so
a relative card path is resolved against the session ``cwd``; absolute paths are kept
verbatim. Titles of file cards (``diff``, ``read``, and a ``generic`` card with
locations) are shown relative to ``cwd`` when they name a path inside it; a path
outside the cwd, or a sibling that merely shares its prefix, stays as written.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..approvals import REMEMBERED_OUTCOMES, ApprovalAnswer
from ..content import content_text
from ..json import snapshot, thaw
from ..models import (
    ApprovalOutcome,
    ApprovalRequest,
    PresentableResult,
    ToolExecutionInput,
    ToolExecutionResult,
)
from ..presentation import (
    DiffResultView,
    FileDiff,
    FileLocation,
    GenericCallView,
    GenericResultView,
    ReadResultView,
    SearchMatchesView,
    SearchPathsView,
    TerminalCallView,
    TerminalResultView,
    ToolCallView,
    ToolResultView,
    WebFetchView,
    WebSearchView,
    command_reach,
)
from ..presenting import present_call, present_result, presentable_result

if TYPE_CHECKING:
    from ..registry import ToolRegistry, ToolScope

__all__ = [
    "ALLOW_ALWAYS",
    "ALLOW_ONCE",
    "REJECT_ALWAYS",
    "REJECT_ONCE",
    "AcpApprovalService",
    "PermissionClient",
    "SessionUpdateClient",
    "acp_content",
    "acp_tool_call",
    "acp_tool_call_update",
    "call_view_to_acp",
    "client_supports_terminal_output",
    "console_text",
    "execute_with_acp",
    "result_view_to_acp",
]

logger = logging.getLogger("dsh_tools")

Json = dict[str, Any]
"""A plain, mutable JSON object as this module returns it."""

ALLOW_ONCE = "allow-once"
"""``optionId`` of the permission option that lets the call run once."""
ALLOW_ALWAYS = "allow-always"
"""``optionId`` of the permission option that lets the call run and remembers that."""
REJECT_ONCE = "reject-once"
"""``optionId`` of the permission option that refuses the call."""
REJECT_ALWAYS = "reject-always"
"""``optionId`` of the permission option that refuses the call and remembers that."""

_CHOICES = {
    ALLOW_ONCE: ApprovalOutcome.ALLOWED_ONCE,
    ALLOW_ALWAYS: ApprovalOutcome.ALLOWED_ALWAYS,
    REJECT_ONCE: ApprovalOutcome.REJECTED,
    REJECT_ALWAYS: ApprovalOutcome.REJECTED_ALWAYS,
}
"""Each option this bridge offers, and the outcome choosing it means."""


class SessionUpdateClient(Protocol):
    """The part of an ACP agent-side connection that sends ``session/update``."""

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> Any: ...


class PermissionClient(Protocol):
    """The part of an ACP agent-side connection that sends ``session/request_permission``."""

    async def request_permission(
        self, session_id: str, tool_call: Any, options: Any, **kwargs: Any
    ) -> Any: ...


# ----------------------------------------------------------------------------- cards


def call_view_to_acp(
    call_id: str,
    view: ToolCallView,
    *,
    raw_input: object = None,
    cwd: str | None = None,
    terminal_output: bool = False,
) -> Json:
    """A pending card as an ACP ``tool_call`` session update (``status: "pending"``).

    ``raw_input`` (usually the call's arguments) becomes ``rawInput`` unless a generic card
    names its own salient input. ``cwd`` is the session's working directory;
    ``terminal_output`` says the client supports the ``_meta`` terminal convention.
    """
    update: Json = {"sessionUpdate": "tool_call", "toolCallId": call_id}
    raw: object = raw_input
    if isinstance(view, GenericCallView):
        locations = view.locations
        update["title"] = _title(view.title, cwd) if locations else view.title
        update["kind"] = view.kind.value if view.kind is not None else "other"
        if view.content is not None:
            update["content"] = acp_content(view.content)
        if view.raw_input is not None:
            raw = thaw(view.raw_input)
    elif isinstance(view, TerminalCallView):
        update["title"] = view.title
        update["kind"] = "execute"
        reach = command_reach(view)
        notes = (view.description, f"[{reach}]" if reach else None)
        content = [_text_item(note) for note in notes if note]
        if terminal_output:
            content.append(_terminal_item(call_id))
            info: Json = {"terminal_id": call_id}
            where = _absolute(view.cwd, cwd) if view.cwd is not None else cwd
            if where is not None:
                info["cwd"] = where
            update["_meta"] = {"terminal_info": info}
        if content:
            update["content"] = content
        locations = ()
    else:
        update["title"] = _title(view.title, cwd)
        update["kind"] = "edit"
        update["content"] = [_diff_item(diff, cwd) for diff in view.diffs]
        locations = view.locations or tuple(FileLocation(path) for path in _paths(view.diffs))
    update["status"] = "pending"
    if locations:
        update["locations"] = [_location(location, cwd) for location in locations]
    if raw is not None:
        update["rawInput"] = _plain(raw)
    return update


def result_view_to_acp(
    call_id: str,
    view: ToolResultView | None,
    result: ToolExecutionResult | PresentableResult,
    *,
    cwd: str | None = None,
    terminal_output: bool = False,
) -> Json:
    """A completed card as an ACP ``tool_call_update``: ``status`` ``completed`` or
    ``failed`` (from the result's error flag), and ``content`` that replaces the pending
    content. ``view=None`` keeps the pending title and shows the raw result content."""
    projection = presentable_result(result)
    raw = projection.content
    update: Json = {
        "sessionUpdate": "tool_call_update",
        "toolCallId": call_id,
        "status": "failed" if projection.is_error else "completed",
    }
    title: str | None = None
    content: list[Json]
    meta: Json | None = None
    if view is None:
        content = acp_content(raw)
    elif isinstance(view, GenericResultView):
        title = view.title
        content = acp_content(view.content if view.content is not None else raw)
    elif isinstance(view, TerminalResultView):
        title = view.title
        output = view.output if view.output is not None else content_text(raw)
        if terminal_output:
            content = [_terminal_item(call_id)]
            meta = {
                "terminal_output": {"terminal_id": call_id, "data": output},
                "terminal_exit": {
                    "terminal_id": call_id,
                    "exit_code": view.exit_code,
                    "signal": view.signal,
                },
            }
        else:
            content = [_text_item(console_text(output, view.exit_code, view.signal))]
        reach = command_reach(view)
        if reach is not None:
            content.append(_text_item(f"[{reach}]"))
    elif isinstance(view, DiffResultView):
        title = _title(view.title, cwd)
        content = [_diff_item(diff, cwd) for diff in view.diffs] or acp_content(raw)
    elif isinstance(view, ReadResultView):
        title = _title(view.title, cwd)
        content = (
            [_text_item(view.content)]
            if view.content is not None
            else _raw_or(raw, lambda: _read_text(view))
        )
        update["locations"] = [_location(FileLocation(view.path, view.offset), cwd)]
    else:
        title = view.title
        content = _raw_or(raw, lambda: _summary(view))
    if title is not None:
        update["title"] = title
    update["content"] = content
    if meta is not None:
        update["_meta"] = meta
    return update


def acp_content(blocks: Iterable[Any]) -> list[Json]:
    """Content blocks as ACP tool call ``content`` items (``{"type": "content", ...}``).

    Text, image, audio, resource link and embedded resource blocks share MCP's shape in
    ACP and pass through with the fields ACP defines for them (annotations and ``_meta``
    are dropped). Any other block, or one missing a required field, becomes the text
    ``[<type> content]``, so the update is always valid ACP.
    """
    items: list[Json] = []
    for block in blocks:
        data = _plain(block)
        converted = _acp_block(data) if isinstance(data, dict) else None
        if converted is None:
            kind = data.get("type") if isinstance(data, dict) else None
            converted = {
                "type": "text",
                "text": f"[{kind if isinstance(kind, str) else 'unknown'} content]",
            }
        items.append({"type": "content", "content": converted})
    return items


_BLOCK_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # type: (required string fields, optional string fields)
    "text": (("text",), ()),
    "image": (("data", "mimeType"), ("uri",)),
    "audio": (("data", "mimeType"), ()),
    "resource_link": (("name", "uri"), ("title", "description", "mimeType")),
}


def _acp_block(data: dict[str, Any]) -> Json | None:
    kind = data.get("type")
    if kind == "resource":
        resource = data.get("resource")
        if not isinstance(resource, dict) or not isinstance(resource.get("uri"), str):
            return None
        body = next((key for key in ("text", "blob") if isinstance(resource.get(key), str)), None)
        if body is None:
            return None
        inner: Json = {"uri": resource["uri"], body: resource[body]}
        if isinstance(resource.get("mimeType"), str):
            inner["mimeType"] = resource["mimeType"]
        return {"type": "resource", "resource": inner}
    if not isinstance(kind, str) or kind not in _BLOCK_FIELDS:
        return None
    required, optional = _BLOCK_FIELDS[kind]
    if not all(isinstance(data.get(key), str) for key in required):
        return None
    block: Json = {"type": kind}
    block.update(
        (key, data[key]) for key in (*required, *optional) if isinstance(data.get(key), str)
    )
    size = data.get("size")
    if (
        kind == "resource_link"
        and isinstance(size, int)
        and not isinstance(size, bool)
        and size >= 0
    ):
        block["size"] = size
    return block


def console_text(output: str, exit_code: int | None = None, signal: str | None = None) -> str:
    """Terminal output as a fenced ``console`` block plus its exit status, for clients
    without the terminal convention. The fence outgrows any backtick run in ``output``."""
    longest = max((len(run) for run in re.findall(r"`+", output)), default=0)
    fence = "`" * max(3, longest + 1)
    body = output if output.endswith("\n") or not output else output + "\n"
    text = f"{fence}console\n{body}{fence}"
    if exit_code is not None:
        text += f"\nExited with code {exit_code}"
    elif signal is not None:
        text += f"\nKilled by {signal}"
    return text


def client_supports_terminal_output(client_capabilities: object) -> bool:
    """True when the client's ``initialize`` capabilities carry ``_meta.terminal_output:
    true``, the opt-in of the ``_meta`` terminal convention.

    Takes the capabilities as JSON data or as the ACP package's ``ClientCapabilities``.
    """
    data = _plain(client_capabilities)
    meta = data.get("_meta") if isinstance(data, dict) else None
    return isinstance(meta, dict) and meta.get("terminal_output") is True


# ------------------------------------------------------------- calls through a registry


def acp_tool_call(
    view: ToolRegistry | ToolScope,
    call: ToolExecutionInput,
    *,
    cwd: str | None = None,
    terminal_output: bool = False,
) -> Json:
    """The ``tool_call`` update of ``call``: its tool's pending card
    (:func:`~dsh_tools.presenting.present_call`), with the call's arguments as
    ``rawInput``. Never raises for a tool or presenter problem."""
    card = present_call(view, call)
    arguments = _json_or_none(call.arguments)
    return call_view_to_acp(
        call.call_id, card, raw_input=arguments, cwd=cwd, terminal_output=terminal_output
    )


def acp_tool_call_update(
    view: ToolRegistry | ToolScope,
    call: ToolExecutionInput,
    result: ToolExecutionResult | PresentableResult,
    *,
    cwd: str | None = None,
    terminal_output: bool = False,
) -> Json:
    """The final ``tool_call_update`` of ``call``: its tool's completed card
    (:func:`~dsh_tools.presenting.present_result`) or the raw content."""
    card = present_result(view, call, result)
    return result_view_to_acp(call.call_id, card, result, cwd=cwd, terminal_output=terminal_output)


async def execute_with_acp(
    view: ToolRegistry | ToolScope,
    call: ToolExecutionInput,
    client: SessionUpdateClient,
    session_id: str,
    *,
    cwd: str | None = None,
    terminal_output: bool = False,
) -> ToolExecutionResult:
    """Run ``call`` through ``view`` and report it to the ACP client: a ``tool_call`` before
    the pipeline runs (so a permission dialog has a card to show), the final
    ``tool_call_update`` after. A client that cannot be reached is logged; the call still
    runs and its result is returned."""
    await _notify(
        client, session_id, acp_tool_call(view, call, cwd=cwd, terminal_output=terminal_output)
    )
    result = await view.execute(call)
    update = acp_tool_call_update(view, call, result, cwd=cwd, terminal_output=terminal_output)
    await _notify(client, session_id, update)
    return result


async def _notify(client: SessionUpdateClient, session_id: str, update: Json) -> None:
    try:
        await client.session_update(session_id=session_id, update=update)
    except Exception:
        logger.warning(
            "ACP session/update for tool call %r failed", update["toolCallId"], exc_info=True
        )


# ------------------------------------------------------------------------- approval


class AcpApprovalService:
    """Answers ``Ask`` with ACP's ``session/request_permission``: the editor shows the
    call with *Allow once* / *Always allow* / *Reject* / *Always reject* and the user's
    choice decides.

    :param client: the agent-side connection (anything with ``request_permission``).
    :param session_id: the ACP session to ask in, or a function of the request that picks
        it (for example from ``request.agent`` when each agent scope is one session).
    :param view: when given, the request describes the call with its tool's card (title,
        kind, locations), resolved for ``request.agent``; otherwise with the tool name.
    :param cwd: the session's working directory, for paths in that description.
    :param remember: offer the ``allow_always`` and ``reject_always`` options (the
        registry's approval store keeps the choice; see :mod:`dsh_tools.approvals`).
    :param always_for_tool: an *always* choice covers every later call of the tool by the
        same agent, not only calls with these exact arguments (the options say so).

    The answer maps to :class:`~dsh_tools.ApprovalOutcome`: *allow once* →
    ``allowed-once``, *always allow* → ``allowed-always``, *reject* (or an option this
    service did not offer) → ``rejected``, *always reject* → ``rejected-always`` (each
    *always* one as an :class:`~dsh_tools.ApprovalAnswer` with ``any_arguments`` when
    ``always_for_tool``); the client's ``cancelled`` outcome → ``cancelled``; an error, an
    unreachable client or an answer that is not an ACP permission outcome →
    ``unavailable``. Only the two *allow* outcomes let the call run.
    """

    def __init__(
        self,
        client: PermissionClient,
        session_id: str | Callable[[ApprovalRequest], str],
        *,
        view: ToolRegistry | ToolScope | None = None,
        cwd: str | None = None,
        remember: bool = True,
        always_for_tool: bool = False,
    ) -> None:
        self.client = client
        self.session_id = session_id
        self.view = view
        self.cwd = cwd
        self.remember = remember
        self.always_for_tool = always_for_tool

    def options(self) -> list[Json]:
        """The ``PermissionOption`` list this service offers, in the order shown."""
        reach = "this tool" if self.always_for_tool else "this call"
        options = [
            {"optionId": ALLOW_ONCE, "name": "Allow once", "kind": "allow_once"},
            {"optionId": ALLOW_ALWAYS, "name": f"Always allow {reach}", "kind": "allow_always"},
            {"optionId": REJECT_ONCE, "name": "Reject", "kind": "reject_once"},
            {"optionId": REJECT_ALWAYS, "name": f"Always reject {reach}", "kind": "reject_always"},
        ]
        if self.remember:
            return options
        return [option for option in options if option["optionId"] in (ALLOW_ONCE, REJECT_ONCE)]

    def tool_call(self, request: ApprovalRequest) -> Json:
        """The ``toolCall`` the permission request describes (a ``ToolCallUpdate``).

        It carries no ``content``: in ACP an update's content replaces the call's, and the
        pending card sent with ``tool_call`` (a diff, say) should stay visible.
        """
        arguments = thaw(request.arguments)
        if self.view is None:
            return {
                "toolCallId": request.call_id,
                "title": request.tool_name,
                "rawInput": arguments,
            }
        call = ToolExecutionInput(
            request.call_id, request.tool_name, request.arguments, agent=request.agent
        )
        card = acp_tool_call(self.view, call, cwd=self.cwd)
        keys = ("toolCallId", "title", "kind", "locations", "rawInput")
        return {key: card[key] for key in keys if key in card}

    async def request(self, request: ApprovalRequest) -> ApprovalOutcome | ApprovalAnswer:
        """Ask the client; see the class docstring for how its answer maps."""
        try:
            session_id = (
                self.session_id if isinstance(self.session_id, str) else self.session_id(request)
            )
            extra = {} if request.reason is None else {"dsh_tools": {"reason": request.reason}}
            response = await self.client.request_permission(
                session_id=session_id,
                tool_call=self.tool_call(request),
                options=self.options(),
                **extra,
            )
        except Exception:
            logger.warning(
                "ACP permission request for tool %r (call %r) failed",
                request.tool_name,
                request.call_id,
                exc_info=True,
            )
            return ApprovalOutcome.UNAVAILABLE
        outcome = self._outcome(response, request)
        if self.always_for_tool and outcome in REMEMBERED_OUTCOMES:
            return ApprovalAnswer(outcome, any_arguments=True)
        return outcome

    def _outcome(self, response: object, request: ApprovalRequest) -> ApprovalOutcome:
        data = _plain(response)
        outcome = data.get("outcome") if isinstance(data, dict) else None
        kind = outcome.get("outcome") if isinstance(outcome, dict) else None
        if kind == "cancelled":
            return ApprovalOutcome.CANCELLED
        if kind == "selected" and isinstance(outcome, dict):
            option = outcome.get("optionId")
            offered = {offer["optionId"] for offer in self.options()}
            if type(option) is str and option in offered:
                return _CHOICES[option]
            logger.warning(
                "ACP permission for call %r chose an option it was not offered, %r; rejecting",
                request.call_id,
                option,
            )
            return ApprovalOutcome.REJECTED
        logger.warning(
            "ACP permission for call %r got a malformed answer %r", request.call_id, response
        )
        return ApprovalOutcome.UNAVAILABLE


# ---------------------------------------------------------------------------- helpers


def _plain(value: object) -> Any:
    """JSON data from frozen JSON, a pydantic model (by alias) or plain data."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", by_alias=True, exclude_none=True)
    return thaw(value)


def _json_or_none(value: object) -> Any:
    try:
        return thaw(snapshot(value, "arguments"))
    except Exception:
        return None


def _text_item(text: str) -> Json:
    return {"type": "content", "content": {"type": "text", "text": text}}


def _terminal_item(call_id: str) -> Json:
    return {"type": "terminal", "terminalId": call_id}


def _diff_item(diff: FileDiff, cwd: str | None) -> Json:
    return {
        "type": "diff",
        "path": _absolute(diff.path, cwd),
        "oldText": diff.old_text,
        "newText": diff.new_text,
    }


def _location(location: FileLocation, cwd: str | None) -> Json:
    data: Json = {"path": _absolute(location.path, cwd)}
    if location.line is not None:
        data["line"] = location.line
    return data


def _paths(diffs: Sequence[FileDiff]) -> list[str]:
    return list(dict.fromkeys(diff.path for diff in diffs))


_WINDOWS_ABSOLUTE = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\)")


def _is_windows(path: str) -> bool:
    return _WINDOWS_ABSOLUTE.match(path) is not None


def _is_absolute(path: str) -> bool:
    return path.startswith("/") or _is_windows(path)


def _absolute(path: str, cwd: str | None) -> str:
    """``path`` resolved against ``cwd`` when relative; never normalized or rewritten."""
    if cwd is None or _is_absolute(path) or not _is_absolute(cwd):
        return path
    separator = "\\" if _is_windows(cwd) else "/"
    if path in ("", "."):
        return cwd
    return cwd.rstrip("/\\") + separator + path


def _title(title: str | None, cwd: str | None) -> str | None:
    """``title`` with absolute paths inside ``cwd`` shown relative to it."""
    if title is None or cwd is None or not _is_absolute(cwd):
        return title
    root = cwd.rstrip("/\\")
    if not root:  # cwd "/" : every path is inside, but "a/b" reads worse than "/a/b"
        return title
    separators = r"[\\/]" if _is_windows(cwd) else "/"
    pattern = re.compile(
        r"(?:^|(?<=[\s\"'`(\[<]))" + re.escape(root) + separators + r"(?=[^\s/\\])"
    )
    return pattern.sub("", title)


def _raw_or(raw: Sequence[Any], summary: Callable[[], str]) -> list[Json]:
    return acp_content(raw) if raw else [_text_item(summary())]


def _read_text(view: ReadResultView) -> str:
    return "\n".join(line.text for line in view.lines)


def _summary(view: SearchMatchesView | SearchPathsView | WebSearchView | WebFetchView) -> str:
    """A text rendering of a card ACP has no equivalent of (used when no raw content)."""
    lines: list[str] = []
    if isinstance(view, SearchMatchesView):
        for entry in view.files:
            lines.extend(f"{entry.path}:{m.line_number}: {m.line}" for m in entry.matches)
        shown = sum(len(entry.matches) for entry in view.files)
    elif isinstance(view, SearchPathsView):
        lines.extend(view.paths)
        shown = len(view.paths)
    elif isinstance(view, WebSearchView):
        if view.answer:
            lines.append(view.answer)
        lines.extend(
            f"- {source.title} <{source.url}>" if source.title else f"- <{source.url}>"
            for source in view.sources
        )
        return "\n".join(lines) + ("\n(more results not shown)" if view.truncated else "")
    else:
        suffix = " (truncated)" if view.truncated else ""
        return f"{view.url}: HTTP {view.status_code}{suffix}"
    if view.truncated:
        lines.append(f"({view.total - shown} more not shown)")
    return "\n".join(lines) if lines else "No results"
