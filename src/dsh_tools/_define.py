"""Defining tools: from one typed function (``@tool``), or with ``define_tool`` and a
parameter spec.

``@tool`` reads a function's signature and docstring; ``define_tool`` takes ``parameters``
as a DSL spec (a dict of property specs; the body gets the validated, frozen mapping) or an
attrs class (the body gets an instance, so ``execute(args: ReadArgs, ctx)`` type-checks
with no casts). Either way the arguments are validated before the body runs, and
everything that can be checked is checked here, at definition time, so a registered tool
never fails for a reason its author could have seen. Every definition error names the tool.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, overload

import attrs

from ._content import ContentLike
from ._context import ToolRunContext
from ._json import FrozenDict
from ._models import (
    PresentableResult,
    ToolDefinition,
    ToolExecution,
    ToolExecutionResult,
    ToolOutput,
)
from ._numbers import positive_finite
from ._paths import ToolPaths
from ._schema.arguments import (
    ArgumentsModel,
    Field,
    annotated_description,
    arguments_model,
    fields_model,
)
from ._schema.dsl import SchemaSpec
from ._schema.subset import assert_supported_json_schema
from .errors import DefinitionError, JsonSchemaError, JsonValueError, within

if TYPE_CHECKING:
    from .presentation._cards import ToolCallView, ToolResultView

__all__ = ["FunctionTool", "define_tool", "tool", "tool_from_function"]

A = TypeVar("A")
T = TypeVar("T")

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
    blocking: bool = True,
    metadata: Mapping[str, Any] | None = None,
    paths: ToolPaths | None = None,
    preflight: Callable[[A | None], object] | None = None,
    reconcile: Callable[[A, Any], object] | None = None,
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
    blocking: bool = True,
    metadata: Mapping[str, Any] | None = None,
    paths: ToolPaths | None = None,
    preflight: Callable[[FrozenDict | None], object] | None = None,
    reconcile: Callable[[FrozenDict, Any], object] | None = None,
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
    blocking: bool = True,
    metadata: Mapping[str, Any] | None = None,
    paths: ToolPaths | None = None,
    preflight: Callable[[Any], object] | None = None,
    reconcile: Callable[[Any, Any], object] | None = None,
) -> ToolDefinition[Any]:
    """Define a tool whose arguments are validated against ``parameters`` before ``execute``.

    Invalid arguments never reach the body: the call fails with ``INVALID_ARGS`` listing
    every violation, so the model can correct itself. ``paths`` declares the arguments
    that name places in the file system, for path rules (:class:`~dsh_tools.ToolPaths`).
    ``blocking=False``: a plain ``def`` body never blocks, so ``await execute`` runs it
    inline on the loop, not in a worker thread (see :class:`~dsh_tools.ToolDefinition`).
    ``preflight`` raises what would refuse a call whatever a person answered, so nobody
    is asked about it (see :class:`~dsh_tools.ToolDefinition`). ``reconcile`` says
    whether an earlier attempt whose outcome is unknown took effect (see
    :class:`~dsh_tools.ToolDefinition` and the docs' "once" page).
    Raises :class:`DefinitionError` or
    :class:`~dsh_tools.errors.JsonSchemaError` for a malformed definition; the message
    starts with ``define_tool(<name>)``. For a tool made of one typed function,
    :func:`tool` reads all of this from its signature and docstring.
    """
    if not isinstance(name, str) or not name:
        raise DefinitionError(f"define_tool(): name must be a non-empty string, got {name!r}")
    return _definition(
        f"define_tool({name})",
        lambda: arguments_model(parameters),
        name=name,
        description=description,
        execute=execute,
        output=output,
        timeout_ms=timeout_ms,
        metadata=metadata,
        is_concurrency_safe=is_concurrency_safe,
        present_call=present_call,
        present_result=present_result,
        finalize_content=finalize_content,
        blocking=blocking,
        paths=paths,
        preflight=preflight,
        reconcile=reconcile,
    )


def _definition(
    label: str,
    model: Callable[[], ArgumentsModel[Any]],
    *,
    name: str,
    description: str,
    execute: Callable[[Any, ToolRunContext], Any],
    output: ToolOutput | None = None,
    timeout_ms: float | None = None,
    metadata: Mapping[str, Any] | None = None,
    blocking: bool = True,
    paths: ToolPaths | None = None,
    **callbacks: Any,
) -> ToolDefinition[Any]:
    """The checks every way of defining a tool shares; each message starts with
    ``label``, which names the tool (``define_tool(nanny): ...``). ``callbacks`` are the
    optional callables (``present_call``, ``is_concurrency_safe``, ...)."""
    if not isinstance(description, str):
        raise DefinitionError(f"{label}: description must be a string, got {description!r}")
    if timeout_ms is not None and not positive_finite(timeout_ms):
        raise DefinitionError(
            f"{label}: timeout_ms must be a positive finite number, got {timeout_ms!r}"
        )
    for option, value in {"execute": execute, **callbacks}.items():
        if (value is not None or option == "execute") and not callable(value):
            raise DefinitionError(f"{label}: {option} must be callable")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise DefinitionError(f"{label}: metadata must be a mapping, got {metadata!r}")
    if output is not None:
        if not isinstance(output, ToolOutput):
            raise DefinitionError(f"{label}: output must be a ToolOutput")
        _named(label, assert_supported_json_schema, output.schema)
    arguments = _named(label, model)
    return ToolDefinition(
        name=name,
        description=description,
        parameters=arguments.json_schema,
        execute=execute,
        output=output,
        timeout_ms=timeout_ms,
        metadata=dict(metadata or {}),
        arguments=arguments,
        blocking=blocking,
        paths=paths,
        **callbacks,
    )


def _named(label: str, step: Callable[..., T], *args: Any) -> T:
    """``step(*args)``; a definition error it raises names the tool, through ``label``."""
    try:
        return step(*args)
    except (DefinitionError, JsonSchemaError, JsonValueError) as error:
        raise within(error, label) from None


# --------------------------------------------------------------------------- functions

FunctionTool = ToolDefinition[Mapping[str, Any]]
"""A tool made from a function: its arguments arrive as a mapping, one entry per
parameter, ready for ``function(**arguments)``."""

_NOT_OPTIONS = frozenset({"name", "description", "parameters", "execute"})
_OPTIONS = tuple(
    name for name in inspect.signature(define_tool).parameters if name not in _NOT_OPTIONS
)
_NO_HINT: Any = object()


@overload
def tool(function: Callable[..., Any], /) -> FunctionTool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None, **options: Any
) -> Callable[[Callable[..., Any]], FunctionTool]: ...
def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    **options: Any,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Decorator: the tool that :func:`tool_from_function` makes of the function below.

    ``@tool`` alone, or ``@tool(name=..., blocking=False, metadata=...)`` with the same
    options. The decorated name is then the :class:`~dsh_tools.ToolDefinition`, ready for
    ``registry.register``; to keep the function callable too, call
    :func:`tool_from_function` instead.
    """
    if function is None:
        return lambda function: tool_from_function(
            function, name=name, description=description, **options
        )
    return tool_from_function(function, name=name, description=description, **options)


def tool_from_function(
    function: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    **options: Any,
) -> FunctionTool:
    """A tool from one typed function: its signature is the parameter schema, its
    docstring the descriptions.

    Each parameter becomes an argument of the type it declares (the types an attrs class
    takes: ``str int float bool None``, ``list[T]``, ``tuple[T, ...]``, ``dict[str, T]``,
    ``Literal``, enums, ``X | None``, attrs classes); one without a default is required.
    A parameter annotated :class:`~dsh_tools.ToolRunContext` (or ``ToolRunContext |
    None``; any name) gets the call's context instead. Descriptions come from
    ``Annotated[T, "..."]`` or, failing that, from the docstring's parameter section
    (Google, NumPy or reST style); the tool's description is the docstring without its
    sections, unless ``description`` is given, and its name is the function's, unless
    ``name`` is. The schema and the argument
    errors are those of the equivalent DSL spec, closed to undeclared keys. ``def`` and
    ``async def`` both work; what the function returns is a body's result, as for
    :func:`define_tool`, whose other keyword options (``output``, ``blocking``,
    ``timeout_ms``, ``metadata``, ``paths``, ...) pass through.

    Raises :class:`~dsh_tools.errors.DefinitionError` (or ``JsonSchemaError``) whose
    message starts with ``tool(<name>)`` and names the parameter at fault.
    """
    name = _tool_name(function, name)
    label = f"tool({name})"
    unknown = sorted(set(options).difference(_OPTIONS))
    if unknown:
        raise DefinitionError(
            f"{label}: unknown option {unknown[0]!r} (the options: {', '.join(_OPTIONS)})"
        )
    summary, documented = _docstring(function, label)
    fields, context = _fields(function, label, documented)
    return _definition(
        label,
        lambda: fields_model("parameter", fields),
        name=name,
        description=_description(description, summary, label),
        execute=_body(function, context),
        **options,
    )


def _tool_name(function: object, name: str | None) -> str:
    """The tool's name: ``name``, or the function's own when it is one a model can call."""
    if not callable(function):
        raise DefinitionError(f"tool(): expected a function, got {function!r}")
    if name is None:
        name = getattr(function, "__name__", None)
        if not isinstance(name, str) or not name.isidentifier():
            raise DefinitionError(f"tool(): {function!r} has no name of its own; pass name=")
    if not isinstance(name, str) or not name:
        raise DefinitionError(f"tool(): name must be a non-empty string, got {name!r}")
    return name


def _description(given: str | None, summary: str, label: str) -> str:
    description = summary if given is None else given
    if not isinstance(description, str) or not description.strip():
        raise DefinitionError(
            f"{label}: a tool needs a description for the model: write a docstring "
            "or pass description="
        )
    return description


def _docstring(function: Callable[..., Any], label: str) -> tuple[str, dict[str, str]]:
    """The docstring's text without its sections, and each documented parameter's
    description (Google, NumPy and reST styles, read by ``docstring_parser``)."""
    text = inspect.getdoc(function)
    if not text:
        return "", {}
    import docstring_parser  # only function tools with a docstring pay for it

    try:
        parsed = docstring_parser.parse(text)
    except docstring_parser.ParseError as error:
        raise DefinitionError(f"{label}: cannot read the docstring ({error})") from None
    described = {
        param.arg_name: param.description
        for param in parsed.params
        if param.args[0] != "attribute" and param.description
    }
    return (parsed.description or "").strip(), described


def _fields(
    function: Callable[..., Any], label: str, documented: Mapping[str, str]
) -> tuple[list[Field], str | None]:
    """The function's parameters as typed fields, and the name of the one that takes the
    run context (``None``: none does)."""
    signature, hints = _signature(function, label)
    fields: list[Field] = []
    context = None
    for parameter in signature.parameters.values():
        where = f"{label}: parameter {parameter.name!r}"
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise DefinitionError(f"{where}: a tool's arguments are named; declare each one")
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise DefinitionError(f"{where} is positional-only; arguments arrive by name")
        hint = hints.get(parameter.name, _NO_HINT)
        if hint is _NO_HINT:
            raise DefinitionError(f"{where} has no type annotation")
        if _is_context(hint):
            if context is not None:
                raise DefinitionError(f"{where}: only one parameter may take the ToolRunContext")
            context = parameter.name
            continue
        default = attrs.NOTHING if parameter.default is parameter.empty else parameter.default
        description = annotated_description(hint)
        if description is None:
            description = documented.get(parameter.name)
        fields.append(Field(parameter.name, hint, default, description))
    for documented_name in documented:
        if documented_name not in signature.parameters:
            raise DefinitionError(
                f"{label}: the docstring describes {documented_name!r}, which is not a parameter"
            )
    return fields, context


def _signature(
    function: Callable[..., Any], label: str
) -> tuple[inspect.Signature, dict[str, Any]]:
    """The signature and its resolved annotations (``from __future__ import annotations``
    included); a partial's are its function's, a callable object's its ``__call__``'s."""
    source: Any = function
    while isinstance(source, functools.partial):
        source = source.func
    if not (inspect.isfunction(source) or inspect.ismethod(source)):
        source = type(source).__call__
    try:
        return inspect.signature(function), typing.get_type_hints(source, include_extras=True)
    except Exception as error:
        raise DefinitionError(f"{label}: cannot resolve the annotations ({error})") from None


def _is_context(hint: Any) -> bool:
    """``ToolRunContext``, or ``ToolRunContext | None`` (a function also called without
    one), ``Annotated`` or not."""
    if typing.get_origin(hint) is Annotated:
        hint = typing.get_args(hint)[0]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        present = [member for member in typing.get_args(hint) if member is not type(None)]
        hint = present[0] if len(present) == 1 else None
    return isinstance(hint, type) and issubclass(hint, ToolRunContext)


def _body(
    function: Callable[..., Any], context: str | None
) -> Callable[[Mapping[str, Any], ToolRunContext], Any]:
    """The body: the function called with the arguments by name (and the context)."""
    is_async = inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        type(function).__call__
    )
    if is_async:

        async def execute_async(args: Mapping[str, Any], ctx: ToolRunContext) -> Any:
            if context is None:
                return await function(**args)
            return await function(**args, **{context: ctx})

        return execute_async
    if context is None:
        return lambda args, ctx: function(**args)
    return lambda args, ctx: function(**args, **{context: ctx})
