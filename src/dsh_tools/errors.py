"""One root error, a stable code for every failure, and the leaf errors that carry context.

Every failure a model sees carries an :class:`ErrorCode` so hosts and models can branch on
a stable token instead of parsing messages. Exceptions raised to Python callers (bad
definitions, bad schemas, bad configuration) are all :class:`DshToolsError` subclasses whose
message names the tool or path and the rule that was broken.

Every exception class of ``dsh_tools`` and ``dsh_tools_plugins`` is one of these, but for
a few internal signals that never reach a caller. The tree, each class with the builtin
exception it also is and the public module that exports it (``tests/test_error_tree.py``
holds the drawing to the classes)::

    DshToolsError                         dsh_tools
    ├── ToolError                         dsh_tools
    │   ├── McpCallError                  dsh_tools.bridges.mcp
    │   │   └── McpConnectionError        dsh_tools.bridges.mcp
    │   └── McpToolError                  dsh_tools.bridges.mcp
    ├── ToolNotFoundError                 dsh_tools
    ├── ToolArgsError                     dsh_tools
    ├── ToolOutputError                   dsh_tools
    ├── JsonValueError (ValueError)       dsh_tools
    ├── JsonSchemaError                   dsh_tools
    │   └── OutputSchemaError             dsh_tools
    ├── DefinitionError (ValueError)      dsh_tools
    ├── RegistrationError (ValueError)    dsh_tools
    ├── PluginError                       dsh_tools
    │   └── PluginConfigError             dsh_tools
    │       └── RulesError (ValueError)   dsh_tools_plugins.permissions
    ├── CardError (ValueError)            dsh_tools.presentation
    ├── WireFormatError (ValueError)      dsh_tools.bridges.wire
    ├── ClientIdentityError (ValueError)  not exported
    ├── HostFileError (ValueError)        dsh_tools
    ├── Retired                           dsh_tools
    ├── TicketError                       dsh_tools.approvals
    │   ├── TicketNotFoundError           dsh_tools.approvals
    │   ├── TicketAnsweredError           dsh_tools.approvals
    │   └── TicketExpiredError            dsh_tools.approvals
    ├── JournalConflictError              dsh_tools.approvals
    ├── ApprovalStoreError                dsh_tools_plugins.approval_store
    ├── SchemaError                       not exported
    └── AuditLogError (ValueError)        dsh_tools_plugins.audit

A class "not exported" is raised and handled inside the package (a bearer token that
names no client becomes the MCP request's ``POLICY_ERROR``; a store file of an unknown
schema becomes an ``ApprovalStoreError``).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TypeVar

__all__ = [
    "DefinitionError",
    "DshToolsError",
    "ErrorCode",
    "JsonSchemaError",
    "JsonValueError",
    "OutputSchemaError",
    "PluginError",
    "RegistrationError",
    "ToolArgsError",
    "ToolError",
    "ToolNotFoundError",
    "ToolOutputError",
]


class ErrorCode(str, enum.Enum):
    """Stable codes carried by failure results (``result.error.info.code``) and errors."""

    UNKNOWN_TOOL = "UNKNOWN_TOOL"
    """No tool of that name is visible to the calling scope (never registered, restricted
    away, registered in another scope, or unregistered meanwhile)."""

    INVALID_ARGS = "INVALID_ARGS"
    """The arguments did not validate against the tool's parameter schema."""

    INVALID_JSON = "INVALID_JSON"
    """A value that must be lossless JSON was not (call arguments, a final result field)."""

    INVALID_TOOL_OUTPUT = "INVALID_TOOL_OUTPUT"
    """The body's value broke the declared output schema, or rendering it failed."""

    TOOL_ERROR = "TOOL_ERROR"
    """The tool body (or its finalizer) raised an exception that carries no code of its own."""

    TRANSIENT = "TRANSIENT"
    """A failure worth retrying (a network blip, a busy resource); raise
    ``ToolError(message, code=ErrorCode.TRANSIENT)`` so the retry policy may retry an
    idempotent tool."""

    TOOL_TIMEOUT = "TOOL_TIMEOUT"
    """The call ran past its deadline (the tool's ``timeout_ms``, the registry's default, or
    a ``TimeoutPolicy`` budget): reported at the deadline, with the body's signal fired (an
    ``async`` body is interrupted; a thread is left to finish, its result discarded)."""

    DENIED = "DENIED"
    """Policy refused the call: a pre-execute ``Deny``, an unanswered or refused ``Ask``,
    or a guard."""

    APPROVAL_PENDING = "APPROVAL_PENDING"
    """The call asked a person, who has not answered yet: an approval ticket is open
    (``result.meta`` names it). The call did not run; it runs once the ticket is approved
    and the call is resumed (``registry.resume(ticket)``) or repeated with the same
    arguments by the same agent. The result concludes the model's turn."""

    APPROVAL_EXPIRED = "APPROVAL_EXPIRED"
    """The call's approval ticket expired before it was answered and resumed; the call did
    not run. Repeating the call opens a new ticket."""

    APPROVAL_STALE = "APPROVAL_STALE"
    """What the call would do changed after a person approved it: its card (the diff of
    an ``edit_file``, say), drawn again when the approved call resumes, differs from the
    card its ticket showed. The call did not run; repeating it asks again with the new
    card."""

    OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"
    """An earlier attempt of the call started and never recorded its end (its process
    died, or an engine's attempt never reported): it may or may not have run, and the
    call does not run again by itself. An idempotent tool runs again, a tool's
    ``reconcile`` step settles it, or a person must (see the docs' "once" page)."""

    BLOCKED = "BLOCKED"
    """A post-execute policy withheld the result and returned corrective feedback instead."""

    POLICY_ERROR = "POLICY_ERROR"
    """A plugin stage raised or returned something that is not a valid decision; the call
    fails closed."""

    ABORTED = "ABORTED"
    """The call was cancelled after the body had started."""

    ABORTED_BEFORE_DISPATCH = "ABORTED_BEFORE_DISPATCH"
    """The call was cancelled before the body started; the body never ran."""

    UNSUPPORTED_SCHEMA = "UNSUPPORTED_SCHEMA"
    """A schema uses a keyword or shape outside the enforced subset."""

    INVALID_DEFINITION = "INVALID_DEFINITION"
    """A tool definition or registration is malformed (bad timeout, duplicate name, ...)."""

    PLUGIN_ERROR = "PLUGIN_ERROR"
    """A plugin could not be loaded or registered."""


class DshToolsError(Exception):
    """Root of every error this package raises.

    ``code`` is a member of :class:`ErrorCode` or, for errors raised by tool authors, any
    string they choose (``ToolError("disk full", code="ENOSPC")``). When such an error ends a
    call, the failure result carries ``info = ToolErrorInfo(type(err).__name__, code)``.
    """

    default_code: str = ErrorCode.TOOL_ERROR.value

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        chosen = code.value if isinstance(code, ErrorCode) else code
        self.code: str = chosen or self.default_code


E = TypeVar("E", bound=DshToolsError)


def within(error: E, where: str) -> E:
    """``error``, its message now led by ``where`` (``define_tool(nanny): ...``): a check
    that knows no tool names the tool through its caller. The error keeps its type and
    fields (``violations``, ``code``, ``path``), so callers still branch on them."""
    error.message = f"{where}: {error.message}"
    error.args = (error.message,)
    return error


class ToolError(DshToolsError):
    """Raise from a tool body to fail the call with your own code and message."""


class JsonValueError(DshToolsError, ValueError):
    """A value is not lossless JSON; ``path`` says where (``value.items[2].when``)."""

    default_code = ErrorCode.INVALID_JSON.value

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f'"{path}" {problem}')
        self.path = path
        self.problem = problem


class _ViolationsError(DshToolsError):
    """An error that lists every violation found, in walk order."""

    prefix = ""
    shown = 20
    """At most this many violations are spelled out in the message (all stay in
    ``violations``), so a huge invalid input cannot flood a model's context."""

    def __init__(self, violations: Sequence[str], *, prefix: str | None = None) -> None:
        self.violations: tuple[str, ...] = tuple(violations)
        head = self.prefix if prefix is None else prefix
        listed = "; ".join(self.violations[: self.shown])
        hidden = len(self.violations) - self.shown
        more = f"; … and {hidden} more" if hidden > 0 else ""
        super().__init__(f"{head}{listed}{more}")


class JsonSchemaError(_ViolationsError):
    """A schema (raw JSON Schema or DSL spec) is outside the enforced subset."""

    default_code = ErrorCode.UNSUPPORTED_SCHEMA.value
    prefix = "unsupported JSON schema: "


class OutputSchemaError(JsonSchemaError):
    """A structured-output schema is unsupported (it must also be object-rooted)."""


class ToolArgsError(_ViolationsError):
    """Call arguments broke the tool's parameter schema; ``violations`` lists each one."""

    default_code = ErrorCode.INVALID_ARGS.value
    prefix = "invalid arguments: "


class ToolOutputError(_ViolationsError):
    """A tool's output value or its rendering broke the output contract."""

    default_code = ErrorCode.INVALID_TOOL_OUTPUT.value

    def __init__(self, tool: str, violations: Sequence[str]) -> None:
        super().__init__(violations, prefix=f'tool "{tool}" returned invalid output: ')
        self.tool = tool


class ToolNotFoundError(DshToolsError):
    """No tool of this name is visible to the calling scope."""

    default_code = ErrorCode.UNKNOWN_TOOL.value

    def __init__(self, name: str) -> None:
        super().__init__(f'unknown tool "{name}"')
        self.name = name


class DefinitionError(DshToolsError, ValueError):
    """A tool definition is malformed (raised by ``define_tool`` and ``register``)."""

    default_code = ErrorCode.INVALID_DEFINITION.value


class RegistrationError(DshToolsError, ValueError):
    """A registration, restriction or plugin hookimpl was rejected by the registry."""

    default_code = ErrorCode.INVALID_DEFINITION.value


class PluginError(DshToolsError):
    """One or more plugins could not be loaded; the message lists each failure."""

    default_code = ErrorCode.PLUGIN_ERROR.value


class PluginConfigError(PluginError):
    """A plugin's configuration, chosen by the host or the user, is broken.

    Raise it from an entry point (at import, or from its factory) when the settings it
    was given cannot be used, such as a permission rules file with a typo.
    :func:`~dsh_tools.load_plugins` never treats it as an optional plugin that
    failed to load: it undoes the call's registrations and raises the error, strict or not,
    because running without configuration someone asked for would be weaker than asked.
    """
