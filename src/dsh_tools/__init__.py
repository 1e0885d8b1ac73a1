"""dsh-tools: host LLM tools as plugins and run every call through a guarded pipeline.

The names below are the public API; submodules hold the details (``dsh_tools.schema`` for
the DSL, ``dsh_tools.presentation`` for UI cards, ``dsh_tools.json`` for frozen JSON).
"""

from ._version import __version__
from .arguments import ArgumentsModel, arguments_model
from .cancel import CancelSignal, CancelSource
from .content import ContextMessage, ImageContent, TextContent
from .define import define_tool
from .errors import (
    DefinitionError,
    DshToolsError,
    ErrorCode,
    JsonSchemaError,
    JsonValueError,
    OutputSchemaError,
    PluginError,
    RegistrationError,
    ToolArgsError,
    ToolError,
    ToolNotFoundError,
    ToolOutputError,
)
from .hookspecs import hookimpl
from .json import FrozenDict, FrozenList, JsonValue
from .jsonschema import (
    StructuredOutputSchema,
    assert_supported_json_schema,
    assert_supported_output_schema,
    compile_validator,
    validate_json_schema_value,
    validate_structured_value,
)
from .models import (
    Accept,
    Allow,
    ApprovalOutcome,
    ApprovalRequest,
    ApprovalService,
    Ask,
    Block,
    Deny,
    ExecutionToken,
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
    failure_result,
    result_to_json,
)
from .pipeline import ToolRunContext
from .registry import ToolRegistry, ToolScope
from .schema import (
    PropertySpec,
    SchemaSpec,
    ValueSpec,
    schema_spec_to_json_schema,
    validate_args,
    value_spec_to_json_schema,
)

__all__ = [
    "Accept",
    "Allow",
    "ApprovalOutcome",
    "ApprovalRequest",
    "ApprovalService",
    "ArgumentsModel",
    "Ask",
    "Block",
    "CancelSignal",
    "CancelSource",
    "ContextMessage",
    "DefinitionError",
    "Deny",
    "DshToolsError",
    "ErrorCode",
    "ExecutionToken",
    "FrozenDict",
    "FrozenList",
    "ImageContent",
    "JsonSchemaError",
    "JsonValue",
    "JsonValueError",
    "OutputSchemaError",
    "PluginError",
    "PresentableResult",
    "PropertySpec",
    "RegistrationError",
    "SchemaSpec",
    "StructuredOutputSchema",
    "TextContent",
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
    "ToolRegistry",
    "ToolRunContext",
    "ToolSchema",
    "ToolScope",
    "ValueSpec",
    "__version__",
    "arguments_model",
    "assert_supported_json_schema",
    "assert_supported_output_schema",
    "compile_validator",
    "define_tool",
    "failure_result",
    "hookimpl",
    "result_to_json",
    "schema_spec_to_json_schema",
    "validate_args",
    "validate_json_schema_value",
    "validate_structured_value",
    "value_spec_to_json_schema",
]
