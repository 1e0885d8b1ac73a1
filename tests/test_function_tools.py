"""Tools from one typed function (issue 34, item 1): ``@tool`` and ``tool_from_function``.

The schema and the argument errors must be those of the equivalent DSL spec, so a tool
reads the same to the model however it was declared.
"""

from __future__ import annotations

import datetime
import enum
import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any, Literal

import anyio
import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_tools import (
    ToolExecutionInput,
    ToolExecutionResult,
    ToolOutput,
    ToolRegistry,
    ToolRunContext,
    define_tool,
    tool,
    tool_from_function,
)
from dsh_tools._schema.dsl import SchemaSpec, schema_spec_to_json_schema, validate_args
from dsh_tools.errors import DefinitionError
from strategies import Point, Tone, TypedParameter, any_values, typed_parameters


def run(definition: Any, arguments: object, **more: Any) -> ToolExecutionResult:
    registry = ToolRegistry()
    registry.register(definition)
    return registry.execute_sync(ToolExecutionInput("1", definition.name, arguments, **more))


def closed(properties: dict[str, Any]) -> SchemaSpec:
    """The DSL spec a function's signature stands for: its parameters, no others."""
    return {"type": "object", "properties": properties, "additionalProperties": False}


class Size(enum.IntEnum):
    SMALL = 1
    LARGE = 2


# =========================================================================== the DSL's schema


def plain(path: str, limit: int = 10, ratio: float = 0.5, verbose: bool = False) -> str:
    """Read."""
    return path


def choices(kind: Literal["a", "b"], size: Size = Size.SMALL, tone: Tone | None = None) -> str:
    """Choose."""
    return kind


def containers(tags: list[str], pairs: tuple[int, ...] = (), at: Point | None = None) -> str:
    """Collect."""
    return ",".join(tags)


def described(
    path: Annotated[str, "File to read"], ctx: ToolRunContext, limit: int | None = None
) -> str:
    """Read a file.

    Args:
        path: Overridden by the annotation.
        limit: At most this many lines.
    """
    return path


SIGNATURES = [
    (
        plain,
        {
            "path": {"type": "string", "required": True},
            "limit": {"type": "integer", "default": 10},
            "ratio": {"type": "number", "default": 0.5},
            "verbose": {"type": "boolean", "default": False},
        },
    ),
    (
        choices,
        {
            "kind": {"type": "string", "enum": ["a", "b"], "required": True},
            "size": {"type": "integer", "enum": [1, 2], "default": 1},
            "tone": {
                "oneOf": [{"type": "string", "enum": ["soft", "loud"]}, {"type": "null"}],
                "default": None,
            },
        },
    ),
    (
        containers,
        {
            "tags": {"type": "array", "items": {"type": "string"}, "required": True},
            "pairs": {"type": "array", "items": {"type": "integer"}, "default": []},
            "at": {
                "oneOf": [
                    {
                        "type": "object",
                        "properties": {
                            "x": {"type": "integer", "required": True},
                            "y": {"type": "integer", "required": True},
                        },
                        "additionalProperties": False,
                    },
                    {"type": "null"},
                ],
                "default": None,
            },
        },
    ),
    (
        described,
        {
            "path": {"type": "string", "description": "File to read", "required": True},
            "limit": {
                "oneOf": [{"type": "integer"}, {"type": "null"}],
                "description": "At most this many lines.",
                "default": None,
            },
        },
    ),
]
SIGNATURE_IDS = [function.__name__ for function, _ in SIGNATURES]

INVALID_ARGUMENTS = [
    {},
    {"path": 3, "limit": "10", "ratio": True, "verbose": 1, "extra": 1},
    {"kind": "c", "size": 3, "tone": "quiet"},
    {"kind": None, "tone": 1},
    {"tags": "a", "pairs": [1.5, "x"], "at": {"x": "1"}},
    {"tags": [None], "at": {"x": 1, "y": 2, "z": 3}},
    {"path": None, "limit": 1.5, "ctx": {}},
]


@pytest.mark.parametrize(("function", "properties"), SIGNATURES, ids=SIGNATURE_IDS)
def test_the_schema_is_the_dsl_spec_of_the_same_parameters(
    function: Callable[..., Any], properties: dict[str, Any]
) -> None:
    definition = tool_from_function(function)

    assert definition.parameters == schema_spec_to_json_schema(closed(properties))


@pytest.mark.parametrize(("function", "properties"), SIGNATURES, ids=SIGNATURE_IDS)
@pytest.mark.parametrize("arguments", INVALID_ARGUMENTS, ids=repr)
def test_invalid_arguments_fail_as_the_dsl_tool_does(
    function: Callable[..., Any], properties: dict[str, Any], arguments: object
) -> None:
    from_function = run(tool_from_function(function), arguments)
    from_spec = run(
        define_tool(
            name=function.__name__,
            description="d",
            parameters=closed(properties),
            execute=lambda args, ctx: "ran",
        ),
        arguments,
    )

    assert from_spec.is_error
    assert from_function.code == from_spec.code == "INVALID_ARGS"
    assert from_function.error.message == from_spec.error.message


def received_json(value: object) -> object:
    """What a received Python value stands for in JSON (to compare with the arguments)."""
    if isinstance(value, enum.Enum):
        return value.value
    if attrs.has(type(value)):
        return {key: received_json(item) for key, item in attrs.asdict(value).items()}
    if isinstance(value, (list, tuple)):
        return [received_json(item) for item in value]
    return value


def conforms(hint: Any, value: object) -> bool:
    """Whether ``value`` is of the exact Python type ``hint`` declares."""
    origin, args = getattr(hint, "__origin__", None), getattr(hint, "__args__", ())
    if origin is Literal:
        return any(type(value) is type(member) and value == member for member in args)
    if origin in (list, tuple):
        return type(value) is origin and all(conforms(args[0], item) for item in value)  # type: ignore[attr-defined]
    if args and type(None) in args:  # X | None
        return value is None or conforms(next(a for a in args if a is not type(None)), value)
    if hint is type(None):
        return value is None
    if hint is Point:
        return type(value) is Point and type(value.x) is int and type(value.y) is int  # type: ignore[attr-defined]
    return type(value) is hint


def generated(parameters: list[TypedParameter], seen: dict[str, Any]) -> Callable[..., str]:
    """A tool function with these parameters (keyword-only, so any order is valid)."""

    def body(**arguments: Any) -> str:
        seen.update(arguments)
        return "ran"

    body.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=inspect.Parameter.empty if required else None,
                annotation=hint,
            )
            for name, hint, _, _, required in parameters
        ]
    )
    body.__annotations__ = {name: hint for name, hint, *_ in parameters}
    body.__doc__ = "A generated tool."
    return body


@given(st.data())
def test_any_signature_validates_as_its_dsl_spec(data: st.DataObject) -> None:
    parameters = data.draw(typed_parameters())
    properties = {name: spec for name, _, spec, _, _ in parameters}
    keys = st.sampled_from([*properties, "extra"])
    arguments = data.draw(any_values() | st.dictionaries(keys, any_values(6), max_size=5))
    definition = tool_from_function(generated(parameters, {}))

    assert definition.parameters == schema_spec_to_json_schema(closed(properties))
    assert definition.arguments.violations(arguments) == validate_args(
        closed(properties), arguments
    )


@given(st.data())
def test_valid_arguments_reach_the_function_as_the_declared_types(data: st.DataObject) -> None:
    parameters = data.draw(typed_parameters())
    arguments = {
        name: data.draw(values)
        for name, _, _, values, required in parameters
        if required or data.draw(st.booleans())
    }
    seen: dict[str, Any] = {}

    result = run(tool_from_function(generated(parameters, seen)), arguments)

    assert result.text == "ran"
    assert seen.keys() == arguments.keys()  # an absent optional takes the function's default
    for name, hint, *_ in parameters:
        if name in seen:
            assert received_json(seen[name]) == arguments[name]
            assert conforms(hint, seen[name]), (hint, seen[name])


# =========================================================================== declaring


def test_the_decorator_reads_name_description_and_parameters() -> None:
    @tool
    def greet(name: Annotated[str, "Who to greet"], excited: bool = False) -> str:
        """Greet someone by name."""
        return f"Hello, {name}{'!' if excited else '.'}"

    assert greet.schema().to_json() == {
        "name": "greet",
        "description": "Greet someone by name.",
        "parameters": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "Who to greet"},
                "excited": {"type": "boolean", "default": False},
            },
            "required": ["name"],
            "additionalProperties": False,
        },
    }
    assert run(greet, {"name": "Ada", "excited": True}).text == "Hello, Ada!"
    assert run(greet, {"name": "Ada"}).text == "Hello, Ada."


def google(path: str, limit: Literal[10, 100, 1000] = 10) -> str:
    """Read a file.

    Lines are numbered.

    Args:
        path: The file,
            relative to the root.
        limit (Literal[10, 100,
            1000]): At most this many lines.

    Returns:
        The lines.
    """
    return path


def numpy(path: str, limit: int = 10) -> str:
    """Read a file.

    Lines are numbered.

    Parameters
    ----------
    path : str
        The file,
        relative to the root.
    limit : int, optional
        At most this many lines.

    Returns
    -------
    str
    """
    return path


def rest(path: str, limit: int = 10) -> str:
    """Read a file.

    Lines are numbered.

    :param path: The file,
        relative to the root.
    :param int limit: At most this many lines.
    :returns: The lines.
    """
    return path


@pytest.mark.parametrize("function", [google, numpy, rest], ids=["google", "numpy", "rest"])
def test_docstrings_describe_the_tool_and_its_parameters(function: Callable[..., Any]) -> None:
    definition = tool_from_function(function)

    assert definition.description == "Read a file.\n\nLines are numbered."
    properties = definition.parameters["properties"]
    assert properties["path"]["description"] == "The file,\nrelative to the root."  # type: ignore[index]
    assert properties["limit"]["description"] == "At most this many lines."  # type: ignore[index]


def test_name_and_description_may_be_given() -> None:
    definition = tool_from_function(google, name="read_file", description="Read one file.")

    assert (definition.name, definition.description) == ("read_file", "Read one file.")
    assert google("x") == "x"  # the plain form leaves the function as it was


def test_the_context_parameter_is_found_by_its_type() -> None:
    @tool
    def where(run_context: ToolRunContext, path: str) -> str:
        """Say which call this is."""
        return f"{run_context.execution.call_id}:{path}"

    assert list(where.parameters["properties"]) == ["path"]  # type: ignore[call-overload]
    assert run(where, {"path": "a"}).text == "1:a"
    refused = run(where, {"path": "a", "run_context": {}})
    assert refused.error.message == (  # type: ignore[union-attr]
        'invalid arguments: "run_context" is not a declared property (additionalProperties: false)'
    )


def test_an_optional_context_lets_the_function_be_called_without_one() -> None:
    def label(path: str, ctx: ToolRunContext | None = None) -> str:
        """Label a path with the call it came from."""
        return f"{ctx.execution.call_id if ctx else 'direct'}:{path}"

    definition = tool_from_function(label)

    assert list(definition.parameters["properties"]) == ["path"]  # type: ignore[call-overload]
    assert run(definition, {"path": "a"}).text == "1:a"
    assert label("a") == "direct:a"


@pytest.mark.anyio
async def test_async_functions_are_awaited() -> None:
    @tool(name="wait")
    async def pause(seconds: float, ctx: ToolRunContext) -> dict[str, Any]:
        """Wait a little."""
        await anyio.sleep(seconds)
        return {"waited": seconds, "cancelled": ctx.signal.cancelled}

    registry = ToolRegistry()
    registry.register(pause)
    result = await registry.execute(ToolExecutionInput("1", "wait", {"seconds": 0}))

    assert result.value == {"waited": 0.0, "cancelled": False}


@pytest.mark.anyio
async def test_a_plain_function_may_block_unless_it_says_it_never_does() -> None:
    import threading

    def where() -> str:
        """Where the body runs."""
        return "loop" if threading.current_thread() is threading.main_thread() else "worker"

    registry = ToolRegistry()
    registry.register(tool(where))
    registry.register(tool(where, name="inline", blocking=False))
    assert tool(where).blocking is True  # as define_tool's default
    assert (await registry.execute(ToolExecutionInput("1", "where"))).text == "worker"
    assert (await registry.execute(ToolExecutionInput("2", "inline"))).text == "loop"


def test_define_tool_options_pass_through() -> None:
    output = ToolOutput(
        {"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]},
        render=lambda args, value: f"{args['a']} + {args['b']} = {value['sum']}",  # type: ignore[index,call-overload]
    )

    @tool(blocking=False, timeout_ms=5000, metadata={"read_only": True}, output=output)
    def add(a: int, b: int) -> dict[str, int]:
        """Add two integers."""
        return {"sum": a + b}

    assert (add.blocking, add.timeout_ms, add.metadata) == (False, 5000, {"read_only": True})
    result = run(add, {"a": 2, "b": 40})
    assert (result.text, result.value) == ("2 + 40 = 42", {"sum": 42})


def test_partials_and_methods_are_functions_too() -> None:
    class Greeter:
        def __init__(self, greeting: str) -> None:
            self.greeting = greeting

        def greet(self, name: str) -> str:
            """Greet someone."""
            return f"{self.greeting}, {name}"

    def scaled(factor: int, value: int) -> int:
        """Scale a value."""
        return factor * value

    assert run(tool(Greeter("Hi").greet), {"name": "Ada"}).text == "Hi, Ada"
    doubled = tool_from_function(functools.partial(scaled, 2), name="double")
    assert list(doubled.parameters["properties"]) == ["value"]  # type: ignore[call-overload]
    assert run(doubled, {"value": 21}).value == 42


# =========================================================================== what cannot be a tool


def untyped(path, limit: int = 1) -> str:  # type: ignore[no-untyped-def]
    """Read."""
    return str(path)


def any_value(value: Any) -> str:
    """Take anything."""
    return ""


def an_object(value: object) -> str:
    """Take anything."""
    return ""


def raw_bytes(data: bytes) -> str:
    """Take bytes."""
    return ""


def a_time(when: datetime.datetime) -> str:
    """Take a time."""
    return ""


def star_args(*paths: str) -> str:
    """Take paths."""
    return ""


def star_kwargs(**options: str) -> str:
    """Take options."""
    return ""


def positional(path: str, /) -> str:
    """Take a path."""
    return path


def two_contexts(a: ToolRunContext, b: ToolRunContext) -> str:
    """Take two contexts."""
    return ""


def stray_docs(path: str) -> str:
    """Read.

    Args:
        pth: The path.
    """
    return path


def undocumented(path: str) -> str:
    return path


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (untyped, "tool(untyped): parameter 'path' has no type annotation"),
        (any_value, "tool(any_value): parameter 'value': unsupported type typing.Any: use str"),
        (an_object, "tool(an_object): parameter 'value': unsupported type <class 'object'>"),
        (raw_bytes, "tool(raw_bytes): parameter 'data': unsupported type <class 'bytes'>"),
        (a_time, "tool(a_time): parameter 'when': unsupported type <class 'datetime.datetime'>"),
        (star_args, "tool(star_args): parameter 'paths': a tool's arguments are named"),
        (star_kwargs, "tool(star_kwargs): parameter 'options': a tool's arguments are named"),
        (positional, "tool(positional): parameter 'path' is positional-only"),
        (two_contexts, "tool(two_contexts): parameter 'b': only one parameter may take"),
        (stray_docs, "tool(stray_docs): the docstring describes 'pth', which is not a parameter"),
        (undocumented, "tool(undocumented): a tool needs a description for the model"),
    ],
    ids=lambda value: getattr(value, "__name__", "message"),
)
def test_what_cannot_be_a_tool_is_refused_naming_tool_and_parameter(
    function: Callable[..., Any], message: str
) -> None:
    with pytest.raises(DefinitionError) as caught:
        tool_from_function(function)

    assert str(caught.value).startswith(message)
    assert caught.value.code == "INVALID_DEFINITION"


def test_a_function_without_a_name_of_its_own_needs_one() -> None:
    with pytest.raises(DefinitionError, match=r"tool\(\): .* has no name of its own; pass name="):
        tool(lambda path: path)
    with pytest.raises(DefinitionError, match=r"tool\(\): expected a function, got 'greet'"):
        tool("greet")  # type: ignore[call-overload]


def test_an_unknown_option_is_refused_naming_the_tool() -> None:
    with pytest.raises(DefinitionError, match=r"tool\(plain\): unknown option 'blockin'"):
        tool(blockin=True)(plain)


def test_unresolvable_annotations_name_the_tool() -> None:
    def later(value: Later) -> str:  # type: ignore[name-defined]  # noqa: F821
        """Use a type defined nowhere."""
        return ""

    with pytest.raises(DefinitionError, match=r"tool\(later\): cannot resolve the annotations"):
        tool(later)
