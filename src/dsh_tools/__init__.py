"""dsh-tools: host LLM tools as plugins and run every call through a guarded pipeline.

The names below are the public API; submodules hold the details (``dsh_tools._schema`` for
the DSL, ``dsh_tools.presentation`` for UI cards, ``dsh_tools._json`` for frozen JSON).
Names are imported on first use (PEP 562), so ``import dsh_tools`` (and the pytest plugin,
which every pytest run in an environment with dsh-tools loads) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from ._arguments import (
        ArgumentsModel,
        arguments_model,
    )
    from ._cancel import (
        CancelSignal,
        CancelSource,
    )
    from ._content import (
        ContextMessage,
        ImageContent,
        TextContent,
    )
    from ._context import (
        ToolRunContext,
    )
    from ._define import (
        define_tool,
        tool,
        tool_from_function,
    )
    from ._json import (
        FrozenDict,
        FrozenList,
        JsonValue,
    )
    from ._jsonschema import (
        StructuredOutputSchema,
    )
    from ._models import (
        Accept,
        Allow,
        ApprovalChannel,
        ApprovalOutcome,
        ApprovalRequest,
        ApprovalService,
        Ask,
        Block,
        Deny,
        PresentableResult,
        ToolDefinition,
        ToolErrorInfo,
        ToolExecution,
        ToolExecutionFailure,
        ToolExecutionInput,
        ToolExecutionResult,
        ToolExecutionSuccess,
        ToolFailure,
        ToolOutput,
        ToolSchema,
        UnreadableArguments,
        failure_result,
    )
    from ._paths import (
        PathArgument,
        ToolPaths,
    )
    from ._plugins import (
        BLOCK_ENV_VAR,
        GUARDS_GROUP,
        PLUGINS_GROUP,
        TOOLS_GROUP,
        LoadReport,
        PluginFailure,
        PluginRecord,
        load_plugins,
    )
    from ._registry import (
        ToolRegistry,
        ToolScope,
    )
    from ._safetext import (
        safe_text,
    )
    from ._schema import (
        PropertySpec,
        SchemaSpec,
        ValueSpec,
    )
    from .approvals import (
        ApprovalAnswer,
        ApprovalKey,
        ApprovalStore,
        ApprovalTicket,
        MemoryApprovalStore,
        TicketAnswer,
        TicketState,
        TicketStore,
    )
    from .errors import (
        DefinitionError,
        DshToolsError,
        ErrorCode,
        JsonSchemaError,
        JsonValueError,
        OutputSchemaError,
        PluginConfigError,
        PluginError,
        RegistrationError,
        ToolArgsError,
        ToolError,
        ToolNotFoundError,
        ToolOutputError,
    )
    from .hookspecs import (
        hookimpl,
    )

_LOCATIONS: dict[str, str] = {
    "Accept": "_models",
    "Allow": "_models",
    "ApprovalAnswer": "approvals",
    "ApprovalChannel": "_models",
    "ApprovalKey": "approvals",
    "ApprovalOutcome": "_models",
    "ApprovalRequest": "_models",
    "ApprovalService": "_models",
    "ApprovalStore": "approvals",
    "ApprovalTicket": "approvals",
    "ArgumentsModel": "_arguments",
    "Ask": "_models",
    "BLOCK_ENV_VAR": "_plugins",
    "Block": "_models",
    "CancelSignal": "_cancel",
    "CancelSource": "_cancel",
    "ContextMessage": "_content",
    "DefinitionError": "errors",
    "Deny": "_models",
    "DshToolsError": "errors",
    "ErrorCode": "errors",
    "FrozenDict": "_json",
    "FrozenList": "_json",
    "GUARDS_GROUP": "_plugins",
    "ImageContent": "_content",
    "JsonSchemaError": "errors",
    "JsonValue": "_json",
    "JsonValueError": "errors",
    "LoadReport": "_plugins",
    "MemoryApprovalStore": "approvals",
    "OutputSchemaError": "errors",
    "PLUGINS_GROUP": "_plugins",
    "PathArgument": "_paths",
    "PluginConfigError": "errors",
    "PluginError": "errors",
    "PluginFailure": "_plugins",
    "PluginRecord": "_plugins",
    "PresentableResult": "_models",
    "PropertySpec": "_schema",
    "RegistrationError": "errors",
    "SchemaSpec": "_schema",
    "StructuredOutputSchema": "_jsonschema",
    "TOOLS_GROUP": "_plugins",
    "TextContent": "_content",
    "TicketAnswer": "approvals",
    "TicketState": "approvals",
    "TicketStore": "approvals",
    "ToolArgsError": "errors",
    "ToolDefinition": "_models",
    "ToolError": "errors",
    "ToolErrorInfo": "_models",
    "ToolExecution": "_models",
    "ToolExecutionFailure": "_models",
    "ToolExecutionInput": "_models",
    "ToolExecutionResult": "_models",
    "ToolExecutionSuccess": "_models",
    "ToolFailure": "_models",
    "ToolNotFoundError": "errors",
    "ToolOutput": "_models",
    "ToolOutputError": "errors",
    "ToolPaths": "_paths",
    "ToolRegistry": "_registry",
    "ToolRunContext": "_context",
    "ToolSchema": "_models",
    "ToolScope": "_registry",
    "UnreadableArguments": "_models",
    "ValueSpec": "_schema",
    "arguments_model": "_arguments",
    "define_tool": "_define",
    "failure_result": "_models",
    "hookimpl": "hookspecs",
    "load_plugins": "_plugins",
    "safe_text": "_safetext",
    "tool": "_define",
    "tool_from_function": "_define",
}

__all__ = [
    "Accept",
    "Allow",
    "ApprovalAnswer",
    "ApprovalChannel",
    "ApprovalKey",
    "ApprovalOutcome",
    "ApprovalRequest",
    "ApprovalService",
    "ApprovalStore",
    "ApprovalTicket",
    "ArgumentsModel",
    "Ask",
    "BLOCK_ENV_VAR",
    "Block",
    "CancelSignal",
    "CancelSource",
    "ContextMessage",
    "DefinitionError",
    "Deny",
    "DshToolsError",
    "ErrorCode",
    "FrozenDict",
    "FrozenList",
    "GUARDS_GROUP",
    "ImageContent",
    "JsonSchemaError",
    "JsonValue",
    "JsonValueError",
    "LoadReport",
    "MemoryApprovalStore",
    "OutputSchemaError",
    "PLUGINS_GROUP",
    "PathArgument",
    "PluginConfigError",
    "PluginError",
    "PluginFailure",
    "PluginRecord",
    "PresentableResult",
    "PropertySpec",
    "RegistrationError",
    "SchemaSpec",
    "StructuredOutputSchema",
    "TOOLS_GROUP",
    "TextContent",
    "TicketAnswer",
    "TicketState",
    "TicketStore",
    "ToolArgsError",
    "ToolDefinition",
    "ToolError",
    "ToolErrorInfo",
    "ToolExecution",
    "ToolExecutionFailure",
    "ToolExecutionInput",
    "ToolExecutionResult",
    "ToolExecutionSuccess",
    "ToolFailure",
    "ToolNotFoundError",
    "ToolOutput",
    "ToolOutputError",
    "ToolPaths",
    "ToolRegistry",
    "ToolRunContext",
    "ToolSchema",
    "ToolScope",
    "UnreadableArguments",
    "ValueSpec",
    "__version__",
    "arguments_model",
    "define_tool",
    "failure_result",
    "hookimpl",
    "load_plugins",
    "safe_text",
    "tool",
    "tool_from_function",
]


def __getattr__(name: str) -> Any:
    module = _LOCATIONS.get(name)
    if module is None:
        raise AttributeError(f"module 'dsh_tools' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
