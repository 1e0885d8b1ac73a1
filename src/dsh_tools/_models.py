"""The frozen records that travel through the pipeline: calls, executions, results, decisions.

Every record is an attrs frozen class whose JSON-carrying fields are snapshotted on
construction, so a result or decision that exists is already lossless JSON and no stage
can mutate what a later stage sees. Change a record with ``attrs.evolve``.

The calls, results and tool definitions are defined here; the decisions and the approval
channel's types are defined in :mod:`dsh_tools._decisions` and imported from here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import attrs

from ._cancel import CancelSignal
from ._content import ContentLike, ContextMessage, content_blocks, content_text, context_messages
from ._decisions import (
    Accept,
    Allow,
    ApprovalChannel,
    ApprovalRequest,
    ApprovalService,
    Ask,
    Block,
    Deny,
    PostExecuteDecision,
    PreExecuteDecision,
)
from ._json import FrozenDict, FrozenList, JsonValue, snapshot, thaw, unicode_text
from ._numbers import positive_finite
from ._paths import ToolPaths
from .approvals._answers import ApprovalOutcome
from .errors import DefinitionError, ErrorCode, JsonValueError, within

if TYPE_CHECKING:
    from ._schema.arguments import ArgumentsModel
    from .presentation._cards import ToolCallView, ToolResultView
    from .progress import ProgressListener

__all__ = [
    "Accept",
    "Allow",
    "ApprovalChannel",
    "ApprovalOutcome",
    "ApprovalRequest",
    "ApprovalService",
    "Ask",
    "Block",
    "Deny",
    "ExecutionToken",
    "PostExecuteDecision",
    "PreExecuteDecision",
    "PresentableResult",
    "ToolDefinition",
    "ToolErrorInfo",
    "ToolExecution",
    "ToolExecutionFailure",
    "ToolExecutionInput",
    "ToolExecutionResult",
    "ToolExecutionSuccess",
    "ToolFailure",
    "ToolOutput",
    "ToolSchema",
    "failure_result",
    "result_to_json",
]

A = TypeVar("A")


def _frozen_json(value: object) -> JsonValue:
    kind = type(value)
    if (
        kind is int
        or kind is bool
        or value is None
        or kind in _FROZEN
        or (kind is str and value.isascii())  # type: ignore[attr-defined]
    ):
        return value  # type: ignore[return-value]  # immutable or snapshotted when made
    return snapshot(value)


_FROZEN = frozenset({FrozenDict, FrozenList})


def _frozen_object(value: object) -> FrozenDict:
    frozen = snapshot(value, "schema")
    if not isinstance(frozen, FrozenDict):
        raise DefinitionError(f"a JSON Schema must be an object, got {type(value).__qualname__}")
    return frozen


def _tool_object(value: object, definition: Any, field: attrs.Attribute[Any]) -> FrozenDict:
    """A tool's JSON object field, frozen; bad data names the tool and the field (the
    error keeps its type, ``JsonValueError`` or ``DefinitionError``)."""
    try:
        return _frozen_object(value)
    except (JsonValueError, DefinitionError) as error:
        raise within(error, f'tool "{definition.name}": {field.name}') from None


_TOOL_OBJECT = attrs.Converter(_tool_object, takes_self=True, takes_field=True)


# --------------------------------------------------------------------------- identity


class ExecutionToken:
    """Opaque identity of one ``execute()``; compare with ``is``. Callers cannot forge one."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<ExecutionToken {id(self):#x}>"


@attrs.frozen
class UnreadableArguments:
    """A call's arguments that could not be read at all, as the call's ``arguments``.

    For a host that parses the model's text itself (the wire parsers, the CLI): JSON text
    cut off at the token limit, say. Passed as ``ToolExecutionInput(arguments=...)``, the
    call still runs through the pipeline, so audit logs, tracers and observers see the
    attempt: it ends ``INVALID_JSON`` on the final path (no policy has arguments to
    judge), its message naming the tool and ``problem``.

    :param text: the arguments as they arrived, when they were text (else ``""``).
    :param problem: what is wrong, for the model (``"arguments" is not valid JSON ...``).
    """

    text: str = attrs.field(validator=attrs.validators.instance_of(str))
    problem: str = attrs.field(validator=attrs.validators.instance_of(str))


def _refused_identifier(instance: object, field: str, value: object) -> TypeError:
    """The error for an identifier no observer, audit log or approval store can key on."""
    got = "an empty string" if value == "" else f"a {type(value).__name__}"
    return TypeError(f"{type(instance).__name__}.{field} must be a non-empty string, got {got}")


@attrs.frozen(slots=False, init=False)  # one per call: a dict-backed record, filled by hand
class ToolExecutionInput:
    """What a host asks the registry to run: one tool call as the model made it.

    ``arguments`` may be any Python value; it is snapshotted once into frozen JSON before
    any policy runs, and non-JSON arguments end the call with an ``INVALID_JSON`` failure
    (:class:`UnreadableArguments` says why, for arguments that could not even be read).
    ``parent`` is the token of the enclosing execution for nested calls. ``on_progress``
    receives the call's progress and output events as the body reports them (after the
    scope's progress filters; see :mod:`dsh_tools.progress`), never after the result.
    ``call_id`` must be a non-empty string (else :class:`TypeError` naming the field):
    observers, the audit log and the approval store key the call on it.
    ``idempotency_key`` names the call across repeats (a retry after a dropped
    connection, an engine's retried step): the call journal runs a call of a tool that is
    not read-only at most once per key and agent; without one, the call id is its key.
    """

    call_id: str
    name: str
    arguments: object = attrs.field(factory=dict)
    agent: str | None = None
    parent: ExecutionToken | None = None
    root_call_id: str | None = None
    signal: CancelSignal | None = None
    on_progress: ProgressListener | None = None
    idempotency_key: str | None = None

    def __init__(
        self,
        call_id: str,
        name: str,
        arguments: object = attrs.NOTHING,  # as attrs writes it: a new dict per call
        agent: str | None = None,
        parent: ExecutionToken | None = None,
        root_call_id: str | None = None,
        signal: CancelSignal | None = None,
        on_progress: ProgressListener | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        # Hand-written (one per call; attrs' validators cost a third): a test pins the fields.
        if not isinstance(call_id, str) or not call_id:
            raise _refused_identifier(self, "call_id", call_id)
        key = idempotency_key
        if key is not None and not (isinstance(key, str) and key):
            raise _refused_identifier(self, "idempotency_key", key)
        fields = self.__dict__
        fields["call_id"] = call_id
        fields["name"] = name
        fields["arguments"] = {} if arguments is attrs.NOTHING else arguments
        fields["agent"] = agent
        fields["parent"] = parent
        fields["root_call_id"] = root_call_id
        fields["signal"] = signal
        fields["on_progress"] = on_progress
        fields["idempotency_key"] = idempotency_key


@attrs.frozen(slots=False)  # one per call: a dict-backed record is filled faster
class ToolExecution:
    """One call as every stage sees it: identity, frozen arguments and the caller's signal.

    ``arguments`` is ``None`` only when the input arguments were not JSON (the call then
    fails before any policy). ``root_call_id`` is the input's, or ``call_id`` when absent.
    """

    token: ExecutionToken
    call_id: str
    name: str
    arguments: FrozenDict | None
    agent: str | None
    parent: ExecutionToken | None
    root_call_id: str
    signal: CancelSignal | None
    dry_run: bool = False
    """``True`` while ``registry.explain`` asks what would happen to the call: nothing
    will run it, so a stage must not act as if it did (no audit entry, no side effect)."""


# --------------------------------------------------------------------------- results


@attrs.frozen
class ToolErrorInfo:
    """Which error ended a call: the error class name and its stable code."""

    name: str
    code: str


@attrs.frozen
class ToolFailure:
    """The structured error of a failed call: a message and its coded info."""

    message: str
    info: ToolErrorInfo


@attrs.frozen(slots=False)  # one per call: a dict-backed record is filled faster
class ToolExecutionSuccess:
    """A successful outcome: the canonical JSON ``value`` and the model-facing content."""

    value: JsonValue = attrs.field(converter=_frozen_json)
    content: FrozenList = attrs.field(converter=content_blocks)
    meta: JsonValue = attrs.field(default=None, converter=_frozen_json)
    additional_contexts: tuple[ContextMessage, ...] = attrs.field(
        default=(), converter=context_messages
    )
    concludes_turn: bool = False
    is_error: Literal[False] = attrs.field(default=False, init=False)

    @property
    def text(self) -> str:
        """The content's text blocks joined by newlines (other blocks as placeholders)."""
        return content_text(self.content)

    @property
    def code(self) -> None:
        """Always ``None``: a success has no error code (a failure's ``code`` names it)."""
        return None

    @property
    def error(self) -> None:
        """Always ``None``: a success has no error (a failure's ``error`` is one)."""
        return None


@attrs.frozen(slots=False)  # one per call: a dict-backed record is filled faster
class ToolExecutionFailure:
    """A failed outcome the model can correct from; ``error.info.code`` says what kind."""

    error: ToolFailure
    content: FrozenList = attrs.field(converter=content_blocks)
    meta: JsonValue = attrs.field(default=None, converter=_frozen_json)
    additional_contexts: tuple[ContextMessage, ...] = attrs.field(
        default=(), converter=context_messages
    )
    concludes_turn: bool = False
    """Set on ``APPROVAL_PENDING``: the model should end its turn and wait for a person."""
    is_error: Literal[True] = attrs.field(default=True, init=False)

    @property
    def text(self) -> str:
        """The content's text blocks joined by newlines (other blocks as placeholders)."""
        return content_text(self.content)

    @property
    def code(self) -> str:
        """Shortcut for ``error.info.code``."""
        return self.error.info.code

    @property
    def value(self) -> None:
        """Always ``None``: a failure has no value (a success's ``value`` is one)."""
        return None


ToolExecutionResult = ToolExecutionSuccess | ToolExecutionFailure


def result_to_json(result: ToolExecutionResult) -> dict[str, Any]:
    """The result as plain JSON data in the wire style of MCP and the upstream design.

    ``{"isError", "content", "value" | "error", "meta"?, "additionalContexts"?,
    "concludesTurn"?}``: optional keys are omitted, never ``null``.
    """
    data: dict[str, Any] = {"isError": result.is_error, "content": thaw(result.content)}
    if isinstance(result, ToolExecutionSuccess):
        data["value"] = thaw(result.value)
    else:
        info = result.error.info
        data["error"] = {
            "message": result.error.message,
            "info": {"name": info.name, "code": info.code},
        }
    if result.meta is not None:
        data["meta"] = thaw(result.meta)
    if result.additional_contexts:
        data["additionalContexts"] = [thaw(c.to_json()) for c in result.additional_contexts]
    if result.concludes_turn:
        data["concludesTurn"] = True
    return data


# --------------------------------------------------------------------------- definitions


@attrs.frozen
class ToolSchema:
    """The only part of a tool a model sees: name, description, parameters."""

    name: str
    description: str
    parameters: FrozenDict

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data ``{"name", "description", "parameters"}`` (a mutable copy)."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": thaw(self.parameters),
        }


@attrs.frozen
class PresentableResult:
    """The durable projection a result presenter gets: final content, error flag, meta."""

    content: FrozenList = attrs.field(converter=content_blocks)
    is_error: bool = False
    meta: JsonValue = attrs.field(default=None, converter=_frozen_json)


@attrs.frozen
class ToolOutput:
    """A tool's declared output: its body returns a JSON value checked against ``schema``.

    ``render(args, value)`` turns the value into model-facing content;
    ``presentation_meta(args, value)`` (top-level calls only) into the result's ``meta``.
    """

    schema: FrozenDict = attrs.field(converter=_frozen_object)
    render: Callable[[Any, JsonValue], str | Sequence[ContentLike]]
    presentation_meta: Callable[[Any, JsonValue], object] | None = None


def _declared_paths(instance: ToolDefinition[Any], attribute: object, value: object) -> None:
    """The declared path arguments must be parameters of the tool."""
    if value is None:
        return
    if not isinstance(value, ToolPaths):
        raise DefinitionError(
            f'tool "{instance.name}" paths must be a ToolPaths, got {type(value).__qualname__}'
        )
    properties = instance.parameters.get("properties")
    known = properties if isinstance(properties, FrozenDict) else FrozenDict()
    for argument in value.arguments:
        if argument.name not in known:
            raise DefinitionError(
                f'tool "{instance.name}" declares path argument {argument.name!r}, which is '
                "not one of its parameters"
            )


def _positive_timeout(instance: ToolDefinition[Any], attribute: object, value: object) -> None:
    if value is not None and not positive_finite(value):
        raise DefinitionError(
            f'tool "{instance.name}" timeout_ms must be a positive finite number, got {value!r}'
        )


def _raw_arguments(definition: ToolDefinition[Any]) -> ArgumentsModel[Any]:
    from ._schema.arguments import raw_arguments_model

    return raw_arguments_model(definition.parameters)


@attrs.frozen
class ToolDefinition(Generic[A]):
    """A tool: its model-facing schema, its body, and optional output and UI callbacks.

    Build one with :func:`~dsh_tools.define_tool`, which validates arguments for you.
    Constructed directly it is a *raw* definition (for bridged tools such as MCP's): the
    parameters schema is trusted and the body gets the frozen arguments unvalidated.

    ``metadata`` is for hosts and plugins, never sent to models: for example
    ``{"idempotent": True}`` lets the retry policy retry the tool, ``{"read_only": True}``
    tells permission rules it changes nothing.

    ``paths`` declares the arguments that name places in the file system
    (:class:`ToolPaths`); path rules judge every one of them, resolved as the tool
    resolves it. ``None``: the tool declares none.

    ``blocking`` says whether a plain ``def`` body may block the thread it runs on (I/O,
    sleeps, CPU-heavy work): ``True`` by default, so under ``await registry.execute`` the
    body runs in a worker thread and never stalls the event loop. ``blocking=False``
    promises that it never blocks, and it runs inline on the loop's thread, saving the
    thread hop (about 100 us). ``execute_sync`` runs a plain body inline either way, and
    an ``async def`` body always runs on the loop.

    ``preflight(args)`` raises what would refuse the call whatever a person answered (a
    program that is not installed, a sandbox that cannot start it): the approval step
    runs it before anyone is asked, and ``explain`` reports its refusal. It is the body's
    own checks, called early, not a copy. Called with ``None`` (by ``dsh-tools check``),
    it raises what would refuse every call. May be ``async def``.

    ``reconcile(args, entry)`` settles a call whose earlier attempt's outcome is unknown
    (its process died mid-body; ``entry`` is that attempt's
    :class:`~dsh_tools.approvals.JournalEntry`): it returns what the body would have
    returned when the effect happened, or ``None`` when it did not and the call may run.
    May be ``async def``.
    """

    name: str = attrs.field(validator=attrs.validators.instance_of(str))
    description: str = attrs.field(validator=attrs.validators.instance_of(str))
    parameters: FrozenDict = attrs.field(converter=_TOOL_OBJECT)  # type: ignore[misc]
    execute: Callable[[A, Any], Any]
    output: ToolOutput | None = None
    timeout_ms: float | None = attrs.field(default=None, validator=_positive_timeout)
    is_concurrency_safe: Callable[[A], object] | None = None
    present_call: Callable[[A], ToolCallView | None] | None = None
    present_result: Callable[[A, PresentableResult], ToolResultView | None] | None = None
    finalize_content: (
        Callable[[ToolExecution, ToolExecutionResult], Sequence[ContentLike] | None] | None
    ) = None
    blocking: bool = True
    metadata: FrozenDict = attrs.field(factory=FrozenDict, converter=_TOOL_OBJECT)  # type: ignore[misc]
    arguments: ArgumentsModel[A] = attrs.field(
        default=attrs.Factory(_raw_arguments, takes_self=True), repr=False
    )
    paths: ToolPaths | None = attrs.field(default=None, kw_only=True, validator=_declared_paths)
    preflight: Callable[[A | None], object] | None = attrs.field(default=None, kw_only=True)
    reconcile: Callable[[A, Any], object] | None = attrs.field(default=None, kw_only=True)

    def schema(self) -> ToolSchema:
        """The model-facing projection (an explicit allowlist of three fields)."""
        return ToolSchema(self.name, self.description, self.parameters)


def failure_result(
    message: str,
    code: str | ErrorCode,
    *,
    name: str | None = None,
    contexts: tuple[ContextMessage, ...] = (),
) -> ToolExecutionFailure:
    """A failure whose content is ``Error: <message>``; ``name`` defaults by code.

    A message that is not valid Unicode (an ``OSError`` naming a file whose bytes are not
    UTF-8, say) is shown with U+FFFD: a failure can always be built and sent.
    """
    message = unicode_text(message)
    code_text = code.value if isinstance(code, ErrorCode) else code
    return ToolExecutionFailure(
        error=ToolFailure(
            message, ToolErrorInfo(name or _DEFAULT_NAMES.get(code_text, "ToolError"), code_text)
        ),
        content=[f"Error: {message}"],
        additional_contexts=contexts,
    )


_DEFAULT_NAMES = {
    ErrorCode.DENIED.value: "PolicyDenied",
    ErrorCode.BLOCKED.value: "PolicyBlocked",
    ErrorCode.ABORTED.value: "AbortError",
    ErrorCode.ABORTED_BEFORE_DISPATCH.value: "AbortError",
    ErrorCode.TOOL_TIMEOUT.value: "TimeoutError",
    ErrorCode.POLICY_ERROR.value: "PolicyError",
    ErrorCode.INVALID_JSON.value: "JsonValueError",
    ErrorCode.UNKNOWN_TOOL.value: "ToolNotFoundError",
    ErrorCode.INVALID_ARGS.value: "ToolArgsError",
    ErrorCode.INVALID_TOOL_OUTPUT.value: "ToolOutputError",
}
