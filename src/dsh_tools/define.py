"""``define_tool``: a tool whose arguments are validated (and typed) before its body runs.

``parameters`` is either a DSL spec (a dict of property specs; the body gets the validated,
frozen mapping) or an attrs class (the body gets an instance, so ``execute(args: ReadArgs,
ctx)`` type-checks with no casts). Everything that can be checked is checked here, at
definition time, so a registered tool never fails for a reason its author could have seen.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

from .arguments import arguments_model
from .content import ContentLike
from .context import ToolRunContext
from .errors import DefinitionError
from .json import FrozenDict
from .jsonschema import assert_supported_json_schema
from .models import (
    PresentableResult,
    ToolDefinition,
    ToolExecution,
    ToolExecutionResult,
    ToolOutput,
)
from .paths import ToolPaths
from .schema import SchemaSpec

if TYPE_CHECKING:
    from .presentation import ToolCallView, ToolResultView

__all__ = ["define_tool"]

A = TypeVar("A")

Finalizer = Callable[[ToolExecution, ToolExecutionResult], "Sequence[ContentLike] | None"]


@overload
def define_tool(
    *,
    name: str,
    description: str,
    parameters: type[A],
    execute: Callable[[A, ToolRunContext], Any],
    output: ToolOutput | None = None,
    timeout_ms: float | None = None,
    is_concurrency_safe: Callable[[A], object] | None = None,
    present_call: Callable[[A], ToolCallView | None] | None = None,
    present_result: Callable[[A, PresentableResult], ToolResultView | None] | None = None,
    finalize_content: Finalizer | None = None,
    blocking: bool = False,
    metadata: Mapping[str, Any] | None = None,
    paths: ToolPaths | None = None,
) -> ToolDefinition[A]: ...


@overload
def define_tool(
    *,
    name: str,
    description: str,
    parameters: SchemaSpec,
    execute: Callable[[FrozenDict, ToolRunContext], Any],
    output: ToolOutput | None = None,
    timeout_ms: float | None = None,
    is_concurrency_safe: Callable[[FrozenDict], object] | None = None,
    present_call: Callable[[FrozenDict], ToolCallView | None] | None = None,
    present_result: Callable[[FrozenDict, PresentableResult], ToolResultView | None] | None = None,
    finalize_content: Finalizer | None = None,
    blocking: bool = False,
    metadata: Mapping[str, Any] | None = None,
    paths: ToolPaths | None = None,
) -> ToolDefinition[FrozenDict]: ...


def define_tool(
    *,
    name: str,
    description: str,
    parameters: Any,
    execute: Callable[[Any, ToolRunContext], Any],
    output: ToolOutput | None = None,
    timeout_ms: float | None = None,
    is_concurrency_safe: Callable[[Any], object] | None = None,
    present_call: Callable[[Any], ToolCallView | None] | None = None,
    present_result: Callable[[Any, PresentableResult], ToolResultView | None] | None = None,
    finalize_content: Finalizer | None = None,
    blocking: bool = False,
    metadata: Mapping[str, Any] | None = None,
    paths: ToolPaths | None = None,
) -> ToolDefinition[Any]:
    """Define a tool whose arguments are validated against ``parameters`` before ``execute``.

    Invalid arguments never reach the body: the call fails with ``INVALID_ARGS`` listing
    every violation, so the model can correct itself. ``paths`` declares the arguments
    that name places in the file system, for path rules (:class:`~dsh_tools.ToolPaths`).
    Raises :class:`DefinitionError` or
    :class:`~dsh_tools.errors.JsonSchemaError` for a malformed definition.
    """
    if not isinstance(name, str) or not name:
        raise DefinitionError(f"define_tool(): name must be a non-empty string, got {name!r}")
    if timeout_ms is not None and (
        isinstance(timeout_ms, bool)
        or not isinstance(timeout_ms, (int, float))
        or not math.isfinite(timeout_ms)
        or timeout_ms <= 0
    ):
        raise DefinitionError(
            f"define_tool({name}): timeout_ms must be a positive finite number, got {timeout_ms!r}"
        )
    if not callable(execute):
        raise DefinitionError(f"define_tool({name}): execute must be callable")
    if output is not None:
        if not isinstance(output, ToolOutput):
            raise DefinitionError(f"define_tool({name}): output must be a ToolOutput")
        assert_supported_json_schema(output.schema)
    model = arguments_model(parameters)
    return ToolDefinition(
        name=name,
        description=description,
        parameters=model.json_schema,
        execute=execute,
        output=output,
        timeout_ms=timeout_ms,
        is_concurrency_safe=is_concurrency_safe,
        present_call=present_call,
        present_result=present_result,
        finalize_content=finalize_content,
        blocking=blocking,
        metadata=dict(metadata or {}),
        arguments=model,
        paths=paths,
    )
