"""dsh-tools: host LLM tools as plugins and run every call through a guarded pipeline.

The names below are the public API; submodules hold the details (``dsh_tools.schema`` for
the DSL, ``dsh_tools.presentation`` for UI cards, ``dsh_tools.json`` for frozen JSON).
Names are imported on first use (PEP 562), so ``import dsh_tools`` (and the pytest plugin,
which every pytest run in an environment with dsh-tools loads) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
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
    from .arguments import (
        ArgumentsModel,
        arguments_model,
    )
    from .cancel import (
        CancelSignal,
        CancelSource,
    )
    from .content import (
        ContextMessage,
        ImageContent,
        TextContent,
    )
    from .context import (
        ToolRunContext,
    )
    from .define import (
        define_tool,
        tool,
        tool_from_function,
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
    from .json import (
        FrozenDict,
        FrozenList,
        JsonValue,
    )
    from .jsonschema import (
        StructuredOutputSchema,
    )
    from .models import (
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
    from .paths import (
        PathArgument,
        ToolPaths,
    )
    from .plugins import (
        BLOCK_ENV_VAR,
        GUARDS_GROUP,
        PLUGINS_GROUP,
        TOOLS_GROUP,
        LoadReport,
        PluginFailure,
        PluginRecord,
        load_plugins,
    )
    from .registry import (
        ToolRegistry,
        ToolScope,
    )
    from .safetext import (
        safe_text,
    )
    from .schema import (
        PropertySpec,
        SchemaSpec,
        ValueSpec,
    )

_LOCATIONS: dict[str, str] = {
    "Accept": "models",
    "Allow": "models",
    "ApprovalAnswer": "approvals",
    "ApprovalChannel": "models",
    "ApprovalKey": "approvals",
    "ApprovalOutcome": "models",
    "ApprovalRequest": "models",
    "ApprovalService": "models",
    "ApprovalStore": "approvals",
    "ApprovalTicket": "approvals",
    "ArgumentsModel": "arguments",
    "Ask": "models",
    "BLOCK_ENV_VAR": "plugins",
    "Block": "models",
    "CancelSignal": "cancel",
    "CancelSource": "cancel",
    "ContextMessage": "content",
    "DefinitionError": "errors",
    "Deny": "models",
    "DshToolsError": "errors",
    "ErrorCode": "errors",
    "FrozenDict": "json",
    "FrozenList": "json",
    "GUARDS_GROUP": "plugins",
    "ImageContent": "content",
    "JsonSchemaError": "errors",
    "JsonValue": "json",
    "JsonValueError": "errors",
    "LoadReport": "plugins",
    "MemoryApprovalStore": "approvals",
    "OutputSchemaError": "errors",
    "PLUGINS_GROUP": "plugins",
    "PathArgument": "paths",
    "PluginConfigError": "errors",
    "PluginError": "errors",
    "PluginFailure": "plugins",
    "PluginRecord": "plugins",
    "PresentableResult": "models",
    "PropertySpec": "schema",
    "RegistrationError": "errors",
    "SchemaSpec": "schema",
    "StructuredOutputSchema": "jsonschema",
    "TOOLS_GROUP": "plugins",
    "TextContent": "content",
    "TicketAnswer": "approvals",
    "TicketState": "approvals",
    "TicketStore": "approvals",
    "ToolArgsError": "errors",
    "ToolDefinition": "models",
    "ToolError": "errors",
    "ToolErrorInfo": "models",
    "ToolExecution": "models",
    "ToolExecutionFailure": "models",
    "ToolExecutionInput": "models",
    "ToolExecutionResult": "models",
    "ToolExecutionSuccess": "models",
    "ToolFailure": "models",
    "ToolNotFoundError": "errors",
    "ToolOutput": "models",
    "ToolOutputError": "errors",
    "ToolPaths": "paths",
    "ToolRegistry": "registry",
    "ToolRunContext": "context",
    "ToolSchema": "models",
    "ToolScope": "registry",
    "UnreadableArguments": "models",
    "ValueSpec": "schema",
    "arguments_model": "arguments",
    "define_tool": "define",
    "failure_result": "models",
    "hookimpl": "hookspecs",
    "load_plugins": "plugins",
    "safe_text": "safetext",
    "tool": "define",
    "tool_from_function": "define",
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
