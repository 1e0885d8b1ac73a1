"""The registry: layers, scopes, shadowing, restrictions, execution modes and routing.

Upstream semantics are behaviors.md §1-§4 and §16 (B001-B044, B162-B166); where the Python
API differs on purpose (design.md §1, no Code Mode, no ``tools/change`` event, ``restrict``
only on scopes, frozen instead of copied schemas) the test says so. Calls run through
``execute_sync`` unless the test is about the async entry point.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import attrs
import pluggy
import pytest

from dsh_tools._context import ToolRunContext
from dsh_tools._define import define_tool
from dsh_tools._json import FrozenDict, FrozenList, thaw
from dsh_tools._models import (
    Deny,
    ToolDefinition,
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolOutput,
    ToolSchema,
    failure_result,
)
from dsh_tools._registry import ToolRegistry, ToolScope
from dsh_tools.errors import DefinitionError, JsonSchemaError, JsonValueError, RegistrationError
from dsh_tools.hookspecs import hookimpl

# --------------------------------------------------------------------------- helpers

OBJECT = {"type": "object", "properties": {}}


def tool(name: str, answer: str | None = None, **fields: Any) -> ToolDefinition[Any]:
    """A raw tool whose body returns ``answer`` (default: its own name) as text."""
    reply = name if answer is None else answer

    def execute(arguments: Any, context: ToolRunContext) -> str:
        return reply

    return ToolDefinition(
        name=name,
        description=f"the {name} tool",
        parameters=fields.pop("parameters", OBJECT),
        execute=fields.pop("execute", execute),
        **fields,
    )


def call(name: str, arguments: object = None, **fields: Any) -> ToolExecutionInput:
    return ToolExecutionInput(
        call_id="call-1", name=name, arguments={} if arguments is None else arguments, **fields
    )


def text(result: ToolExecutionResult) -> str:
    return "\n".join(str(block["text"]) for block in result.content if block["type"] == "text")


def ran(view: ToolRegistry | ToolScope, name: str) -> str:
    """The text a successful call of ``name`` through ``view`` produced."""
    result = view.execute_sync(call(name))
    assert not result.is_error, result
    return text(result)


def assert_unknown(result: ToolExecutionResult, name: str) -> None:
    assert isinstance(result, ToolExecutionFailure)
    assert result.error.message == f'unknown tool "{name}"'
    assert result.error.info.name == "ToolNotFoundError"
    assert result.code == "UNKNOWN_TOOL"
    assert text(result) == f'Error: unknown tool "{name}"'


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry()


# =========================================================================== §1 registration


def test_global_registration_is_visible_everywhere_until_disposed(registry: ToolRegistry) -> None:
    """B001, B015: a global tool reaches every scope; get() returns the object itself."""
    echo = tool("echo")
    dispose = registry.register(echo)
    nested = registry.scope("a").scope("b")

    for view in (registry, registry.scope("a"), nested):
        assert view.get("echo") is echo
        assert view.names() == ["echo"]
        assert [schema.name for schema in view.schemas()] == ["echo"]
        assert ran(view, "echo") == "echo"

    dispose()

    for view in (registry, nested):
        assert view.get("echo") is None
        assert view.names() == []
        assert view.schemas() == []
        assert_unknown(view.execute_sync(call("echo")), "echo")


def test_closing_a_scope_removes_only_its_registrations(registry: ToolRegistry) -> None:
    """B002: an owner going away takes its tools; other owners' tools stay."""
    registry.register(tool("echo"))
    scope = registry.scope("agent")
    scope.register(tool("scoped"))
    assert scope.names() == ["echo", "scoped"]

    scope.close()

    assert scope.names() == ["echo"]
    assert registry.names() == ["echo"]


def test_tool_disposers_are_idempotent_and_exact(registry: ToolRegistry) -> None:
    """B003: a disposer only ever removes the entry it created."""
    echo = tool("echo")
    first = registry.register(echo)
    first()
    first()
    assert registry.get("echo") is None

    registry.register(echo)  # the same definition again: a new entry
    first()
    assert registry.get("echo") is echo

    scope = registry.scope("a")
    scoped_first = scope.register(tool("echo", "scoped"))
    scoped_first()
    scope.register(tool("echo", "scoped again"))
    scoped_first()
    assert ran(scope, "echo") == "scoped again"


def test_disposer_of_a_closed_scope_does_not_touch_the_reopened_scope(
    registry: ToolRegistry,
) -> None:
    scope = registry.scope("a")
    old = scope.register(tool("mine", "old"))
    scope.close()
    registry.scope("a").register(tool("mine", "new"))

    old()

    assert ran(registry.scope("a"), "mine") == "new"


def test_duplicate_global_name_is_rejected_and_the_first_stays(registry: ToolRegistry) -> None:
    """B004: the message names the tool and points at per-agent registration."""
    first = tool("x", "first")
    registry.register(first)

    with pytest.raises(RegistrationError) as caught:
        registry.register(tool("x", "second"))

    message = str(caught.value)
    assert 'tool "x" is already registered globally' in message
    assert "registry.scope(agent)" in message
    assert caught.value.code == "INVALID_DEFINITION"
    assert registry.get("x") is first
    assert registry.names() == ["x"]


def test_duplicate_name_in_one_scope_is_rejected(registry: ToolRegistry) -> None:
    """B005: the message names the tool and the scope, nested scopes by their path."""
    registry.scope("a").register(tool("y"))
    with pytest.raises(RegistrationError, match=r"tool \"y\" is already registered in scope 'a'"):
        registry.scope("a").register(tool("y", "again"))

    nested = registry.scope("a").scope("b")
    nested.register(tool("z"))
    with pytest.raises(RegistrationError, match=r"tool \"z\" is already registered in scope 'a/b'"):
        nested.register(tool("z"))
    assert ran(registry.scope("a"), "y") == "y"


def test_same_name_in_different_layers_is_shadowing_not_a_duplicate(
    registry: ToolRegistry,
) -> None:
    """B006."""
    registry.register(tool("x", "global"))
    registry.scope("a").register(tool("x", "a"))
    registry.scope("b").register(tool("x", "b"))
    registry.scope("a").scope("c").register(tool("x", "a/c"))

    assert ran(registry, "x") == "global"
    assert ran(registry.scope("a"), "x") == "a"
    assert ran(registry.scope("b"), "x") == "b"
    assert ran(registry.scope("a").scope("c"), "x") == "a/c"


@pytest.mark.parametrize(
    "definition",
    [
        {"name": "x", "description": "d", "parameters": {}, "execute": print},
        None,
        "x",
        print,
    ],
    ids=["dict", "None", "str", "function"],
)
def test_register_rejects_what_is_not_a_tool_definition(
    registry: ToolRegistry, definition: Any
) -> None:
    with pytest.raises(DefinitionError, match=r"register\(\) expects a ToolDefinition, got "):
        registry.register(definition)
    assert registry.names() == []


def test_register_rejects_a_non_callable_body(registry: ToolRegistry) -> None:
    with pytest.raises(DefinitionError, match=r'tool "x" execute must be callable'):
        registry.register(tool("x", execute="not a function"))
    assert registry.get("x") is None


@pytest.mark.parametrize(
    "output",
    [
        {"schema": {"type": "string"}, "render": str},
        "text",
        ToolOutput({"type": "string"}, render="not callable"),  # type: ignore[arg-type]
    ],
    ids=["dict", "str", "render-not-callable"],
)
def test_register_rejects_a_malformed_output_declaration(
    registry: ToolRegistry, output: Any
) -> None:
    """B007 in Python terms: ``output`` is optional, but when given it must be a ToolOutput."""
    with pytest.raises(DefinitionError, match=r'tool "x" output must be a ToolOutput'):
        registry.register(tool("x", output=output))
    assert registry.get("x") is None


def test_register_rejects_a_non_callable_presentation_meta(registry: ToolRegistry) -> None:
    output = ToolOutput({"type": "string"}, lambda a, v: str(v), presentation_meta="meta")  # type: ignore[arg-type]
    with pytest.raises(
        DefinitionError, match=r'tool "x" output.presentation_meta must be callable'
    ):
        registry.register(tool("x", output=output))
    assert registry.names() == []


def test_output_schema_outside_the_subset_fails_registration(registry: ToolRegistry) -> None:
    """B008: every violation is listed; a raw definition is checked at register()."""
    schema = {"type": "object", "properties": {"a": {"type": "string", "format": "uri"}}, "x": 1}
    definition = tool("x", output=ToolOutput(schema, lambda a, v: "ok"))

    with pytest.raises(JsonSchemaError) as caught:
        registry.register(definition)

    assert len(caught.value.violations) == 2
    assert any("format" in violation for violation in caught.value.violations)
    assert str(caught.value).startswith('tool "x": output.schema: unsupported JSON schema: ')
    assert caught.value.code == "UNSUPPORTED_SCHEMA"
    assert registry.get("x") is None


def test_define_tool_checks_the_output_schema_at_definition_time() -> None:
    with pytest.raises(JsonSchemaError, match="format"):
        define_tool(
            name="x",
            description="d",
            parameters={},
            execute=lambda a, c: "ok",
            output=ToolOutput({"type": "string", "format": "uri"}, lambda a, v: str(v)),
        )


def test_output_schema_is_checked_before_the_duplicate_name(registry: ToolRegistry) -> None:
    """B010: with several problems at once, the schema error is the one reported."""
    registry.register(tool("x", "first"))
    broken = tool("x", output=ToolOutput({"type": "string", "format": "uri"}, lambda a, v: "o"))

    with pytest.raises(JsonSchemaError):
        registry.register(broken)
    assert ran(registry, "x") == "first"


def test_a_valid_output_schema_registers_and_validates_values(registry: ToolRegistry) -> None:
    output = ToolOutput(
        {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
        lambda a, value: f"n={value['n']}",  # type: ignore[index,call-overload]
    )
    registry.register(tool("good", execute=lambda a, c: {"n": 3}, output=output))
    registry.register(tool("bad", execute=lambda a, c: {"n": "3"}, output=output))

    assert ran(registry, "good") == "n=3"
    assert registry.execute_sync(call("bad")).code == "INVALID_TOOL_OUTPUT"


BAD_TIMEOUTS = [0, -5, math.inf, -math.inf, math.nan, True, "5000", [5000]]


@pytest.mark.parametrize("timeout_ms", BAD_TIMEOUTS, ids=repr)
def test_tool_definition_rejects_a_bad_timeout(timeout_ms: Any) -> None:
    """B009."""
    with pytest.raises(
        DefinitionError, match=r'tool "t" timeout_ms must be a positive finite number'
    ):
        tool("t", timeout_ms=timeout_ms)


@pytest.mark.parametrize("timeout_ms", BAD_TIMEOUTS, ids=repr)
def test_define_tool_rejects_a_bad_timeout(timeout_ms: Any) -> None:
    """B009, E4: ``define_tool(<name>): timeout_ms must be a positive finite number``."""
    with pytest.raises(
        DefinitionError, match=r"define_tool\(t\): timeout_ms must be a positive finite number"
    ):
        define_tool(
            name="t", description="d", parameters={}, execute=lambda a, c: "", timeout_ms=timeout_ms
        )


@attrs.frozen
class BytesArgs:
    data: bytes


class PlainArgs:
    data: str


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (
            {
                "parameters": {
                    "type": "object",
                    "properties": {"n": {"type": "number", "default": math.nan}},
                }
            },
            JsonSchemaError,
            "define_tool(nanny): unsupported JSON schema: parameters.properties.n.default "
            "annotation must be lossless JSON data",
        ),
        (
            {"parameters": {"n": {"type": "number", "default": math.nan}}},
            JsonSchemaError,
            "define_tool(nanny): unsupported JSON schema: parameters.n.default annotation "
            "must be lossless JSON data",
        ),
        (
            {"parameters": BytesArgs},
            DefinitionError,
            "define_tool(nanny): parameters class BytesArgs, field 'data': unsupported type",
        ),
        (
            {"parameters": PlainArgs},
            DefinitionError,
            "define_tool(nanny): parameters class PlainArgs must be an attrs class",
        ),
        (
            {"output": ToolOutput({"type": "string", "format": "uri"}, lambda a, v: str(v))},
            JsonSchemaError,
            "define_tool(nanny): unsupported JSON schema: schema.format is not a supported",
        ),
        ({"description": None}, DefinitionError, "define_tool(nanny): description must be"),
        ({"present_call": "card"}, DefinitionError, "define_tool(nanny): present_call must be"),
        ({"metadata": ["x"]}, DefinitionError, "define_tool(nanny): metadata must be a mapping"),
        ({"metadata": {"x": math.inf}}, JsonValueError, 'tool "nanny": metadata: "schema.x"'),
    ],
    ids=[
        "object-root",
        "property-map",
        "attrs-field",
        "not-attrs",
        "output-schema",
        "description",
        "callback",
        "metadata-type",
        "metadata-json",
    ],
)
def test_every_definition_error_names_its_tool(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    """Issue 34: a definition error raised by a check that knows no tool (the DSL, the
    attrs describer, the raw subset) is still reported under the tool's name, keeping its
    type and violations."""
    arguments = {"description": "d", "parameters": {}, "execute": lambda a, c: "", **options}

    with pytest.raises(error) as caught:
        define_tool(name="nanny", **arguments)

    assert str(caught.value).startswith(message)
    assert caught.value.message == str(caught.value)  # type: ignore[attr-defined]
    if isinstance(caught.value, JsonSchemaError):
        assert not caught.value.violations[0].startswith("define_tool")


@pytest.mark.parametrize("timeout_ms", [None, 5000, 0.5])
def test_a_valid_timeout_is_kept_on_the_definition(
    registry: ToolRegistry, timeout_ms: float | None
) -> None:
    raw = tool("raw", timeout_ms=timeout_ms)
    typed = define_tool(
        name="typed", description="d", parameters={}, execute=lambda a, c: "", timeout_ms=timeout_ms
    )
    registry.register(raw)
    registry.register(typed)
    assert registry.get("raw") is raw
    assert raw.timeout_ms == timeout_ms
    assert typed.timeout_ms == timeout_ms


def test_a_bad_timeout_cannot_be_smuggled_in_with_evolve() -> None:
    with pytest.raises(DefinitionError, match="timeout_ms"):
        attrs.evolve(tool("t"), timeout_ms=-1)


def test_registration_trusts_raw_parameters(registry: ToolRegistry) -> None:
    """B012, B016: a raw schema is not checked against the subset, and its ``required`` is
    not enforced: the registry never validates a raw tool's arguments."""
    parameters = {
        "type": "object",
        "properties": {"path": {"type": "string", "x-vendor": {"anything": True}}},
        "required": ["path"],
        "patternProperties": {"^x": {}},
    }
    seen: list[object] = []

    def execute(arguments: Any, context: ToolRunContext) -> str:
        seen.append(arguments)
        return "reached"

    registry.register(tool("raw", parameters=parameters, execute=execute))

    assert registry.schemas()[0].parameters == parameters
    assert ran(registry, "raw") == "reached"
    assert seen == [{}]


def test_non_json_parameters_are_rejected_when_the_definition_is_built() -> None:
    """B021, deliberately earlier: parameters are snapshotted into frozen JSON when the
    ToolDefinition is constructed, so ``schemas()`` can never fail later."""
    with pytest.raises(JsonValueError, match=r'"schema.default" is NaN'):
        tool("x", parameters={"type": "number", "default": math.nan})


def test_an_empty_tool_name_is_rejected(registry: ToolRegistry) -> None:
    with pytest.raises(DefinitionError, match="non-empty"):
        registry.register(tool(""))


# =========================================================================== §2 schemas()


def test_schemas_project_exactly_name_description_parameters(registry: ToolRegistry) -> None:
    """B017, B165: callbacks, output, timeout and classifiers never appear."""
    parameters = {"type": "object", "properties": {"q": {"type": "string"}}}
    registry.register(
        tool(
            "full",
            parameters=parameters,
            output=ToolOutput({"type": "string"}, lambda a, v: str(v), lambda a, v: {"m": 1}),
            timeout_ms=5000,
            is_concurrency_safe=lambda a: True,
            present_call=lambda a: None,
            present_result=lambda a, r: None,
            finalize_content=lambda e, r: None,
            blocking=True,
        )
    )

    (schema,) = registry.schemas()

    assert type(schema) is ToolSchema
    assert [field.name for field in attrs.fields(ToolSchema)] == [
        "name",
        "description",
        "parameters",
    ]
    assert attrs.asdict(schema) == {
        "name": "full",
        "description": "the full tool",
        "parameters": parameters,
    }
    dumped = json.dumps(attrs.asdict(schema))
    for hidden in ("execute", "output", "timeout", "concurrency", "present", "finalize"):
        assert hidden not in dumped


def test_schemas_parameters_are_deep_frozen_and_equal_the_registered_schema(
    registry: ToolRegistry,
) -> None:
    """B018 in Python terms: frozen instead of copied; mutation is impossible."""
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["tags"],
    }
    registry.register(tool("x", parameters=parameters))
    parameters["properties"]["tags"]["items"]["type"] = "number"  # the caller's copy only

    schema = registry.schemas()[0]
    frozen = schema.parameters
    expected = {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["tags"],
    }
    assert frozen == expected
    assert isinstance(frozen, FrozenDict)
    assert isinstance(frozen["properties"], FrozenDict)
    assert isinstance(frozen["required"], FrozenList)

    with pytest.raises(TypeError, match="read-only"):
        frozen["type"] = "array"
    with pytest.raises(TypeError, match="read-only"):
        frozen["properties"]["tags"]["items"].update(type="number")  # type: ignore[union-attr]
    with pytest.raises(TypeError, match="read-only"):
        del frozen["required"]
    with pytest.raises(AttributeError):
        frozen["required"].append("more")  # type: ignore[union-attr]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        schema.description = "changed"  # type: ignore[misc]

    thawed = thaw(frozen)
    thawed["type"] = "array"  # a thawed copy is the caller's own
    assert registry.schemas()[0].parameters == expected
    assert registry.get("x").parameters == expected  # type: ignore[union-attr]


def test_deeply_nested_parameters_project_without_recursion_errors(
    registry: ToolRegistry,
) -> None:
    """B019 within our depth cap (json.MAX_DEPTH): deep schemas freeze and project."""
    node: dict[str, Any] = {"type": "string"}
    for _ in range(90):
        node = {"oneOf": [node]}
    registry.register(tool("deep", parameters={"type": "object", "properties": {"v": node}}))

    parameters = registry.schemas()[0].parameters
    inner: Any = parameters["properties"]["v"]  # type: ignore[index,call-overload]
    depth = 0
    while "oneOf" in inner:
        assert isinstance(inner, FrozenDict)
        inner = inner["oneOf"][0]
        depth += 1
    assert depth == 90
    assert inner == {"type": "string"}


def test_schema_order_follows_the_scope_chain(registry: ToolRegistry) -> None:
    """B020 (no run_code): globals in registration order, then names first contributed by
    ancestors, then the scope's own new names; a shadow keeps the shadowed slot."""
    registry.register(tool("g1"))
    registry.register(tool("g2"))
    parent = registry.scope("p")
    child = parent.scope("c")
    child.register(tool("c1"))  # registered first, listed after inherited names
    child.register(tool("p1", "child p1"))
    parent.register(tool("p1"))
    parent.register(tool("g2", "parent g2"))
    registry.register(tool("g3"))  # later globals still come before scoped names
    child.register(tool("g1", "child g1"))

    assert registry.names() == ["g1", "g2", "g3"]
    assert parent.names() == ["g1", "g2", "g3", "p1"]
    assert child.names() == ["g1", "g2", "g3", "p1", "c1"]
    assert [schema.name for schema in child.schemas()] == child.names()
    assert [schema.description for schema in child.schemas()] == [
        "the g1 tool",
        "the g2 tool",
        "the g3 tool",
        "the p1 tool",
        "the c1 tool",
    ]
    assert ran(child, "g1") == "child g1"
    assert ran(child, "g2") == "parent g2"
    assert ran(child, "p1") == "child p1"


def test_a_shadow_of_a_restricted_away_name_takes_a_new_slot(registry: ToolRegistry) -> None:
    """B020: the slot is kept only when the shadowed name was visible."""
    registry.register(tool("a"))
    registry.register(tool("b"))
    scope = registry.scope("s")
    scope.restrict(deny=["a"])
    scope.register(tool("a", "own a"))

    assert scope.names() == ["b", "a"]
    assert ran(scope, "a") == "own a"


def test_define_tool_parameters_projection(registry: ToolRegistry) -> None:
    """B022: required names in declaration order, omitted when empty, root left open."""
    registry.register(
        define_tool(
            name="typed",
            description="d",
            parameters={
                "z": {"type": "string", "required": True},
                "a": {"type": "integer"},
                "m": {"type": "boolean", "required": True},
            },
            execute=lambda a, c: "",
        )
    )
    registry.register(
        define_tool(name="empty", description="d", parameters={}, execute=lambda a, c: "")
    )

    typed, empty = registry.schemas()
    assert list(typed.parameters["required"]) == ["z", "m"]  # type: ignore[arg-type]
    assert "additionalProperties" not in typed.parameters
    assert empty.parameters == {"type": "object", "properties": {}}


def test_schema_objects_are_stable_between_calls(registry: ToolRegistry) -> None:
    registry.register(tool("x"))
    assert registry.schemas() == registry.schemas()
    assert registry.schemas() is not registry.schemas()  # a new list each time
    registry.schemas().clear()
    assert registry.names() == ["x"]


# =========================================================================== §3 scopes


def test_scoped_tool_is_visible_to_its_scope_and_descendants_only(
    registry: ToolRegistry,
) -> None:
    """B024, B025: elsewhere a scoped tool is indistinguishable from a missing one."""
    mine = tool("mine")
    registry.scope("a").register(mine)

    assert registry.scope("a").get("mine") is mine
    assert registry.scope("a").scope("b").get("mine") is mine
    assert ran(registry.scope("a").scope("b"), "mine") == "mine"
    for view in (registry, registry.scope("sibling"), registry.scope("ab")):
        assert view.get("mine") is None
        assert view.names() == []
        assert_unknown(view.execute_sync(call("mine")), "mine")
    assert_unknown(registry.execute_sync(call("mine", agent="sibling")), "mine")
    assert_unknown(registry.execute_sync(call("nonexistent", agent="a")), "nonexistent")


@pytest.mark.parametrize("scoped_first", [True, False])
def test_a_scoped_tool_shadows_a_global_regardless_of_order(
    registry: ToolRegistry, scoped_first: bool
) -> None:
    """B026."""
    scope = registry.scope("a")
    if scoped_first:
        scope.register(tool("x", "scoped"))
        registry.register(tool("x", "global"))
    else:
        registry.register(tool("x", "global"))
        scope.register(tool("x", "scoped"))

    assert ran(scope, "x") == "scoped"
    assert ran(registry, "x") == "global"
    assert ran(registry.scope("other"), "x") == "global"
    assert scope.names() == ["x"]
    assert [schema.description for schema in scope.schemas()] == ["the x tool"]
    assert scope.get("x") is not registry.get("x")


def test_the_nearest_registration_wins_along_the_chain(registry: ToolRegistry) -> None:
    """B027: own layer > nearer ancestor > farther ancestor > global."""
    a = registry.scope("a")
    b = a.scope("b")
    c = b.scope("c")
    registry.register(tool("x", "global"))
    a.register(tool("x", "a"))
    b.register(tool("x", "b"))

    assert ran(c, "x") == "b"
    c.register(tool("x", "c"))
    assert ran(c, "x") == "c"
    assert ran(b, "x") == "b"
    assert ran(a, "x") == "a"
    assert ran(a.scope("other"), "x") == "a"


def test_closing_a_scope_unwinds_tools_guards_restrictions_and_plugins(
    registry: ToolRegistry,
) -> None:
    """B028, nested scopes included; a sibling whose key shares a prefix is untouched."""
    registry.register(tool("g"))
    registry.register(tool("bash"))
    observed: list[str | None] = []

    class Observer:
        @hookimpl
        def dsh_tools_result(self, execution: ToolExecution) -> None:
            observed.append(execution.agent)

    scope = registry.scope("a")
    child = scope.scope("b")
    scope.register(tool("mine"))
    scope.restrict(deny=["bash"])
    scope.guard(lambda execution: "scope guard says no")
    child.register(tool("child-only"))
    child.guard(lambda execution: "child guard says no")
    plugin = Observer()
    child.add_plugin(plugin)
    sibling = registry.scope("ab")
    sibling.register(tool("sib"))
    sibling.guard(lambda execution: "sibling guard")

    assert text(child.execute_sync(call("g"))) == "Error: scope guard says no"
    assert child.names() == ["g", "mine", "child-only"]

    scope.close()

    assert scope.get("mine") is None
    assert child.get("child-only") is None
    assert scope.names() == ["g", "bash"]
    assert child.names() == ["g", "bash"]
    assert ran(scope, "bash") == "bash"
    observed.clear()
    assert ran(child, "g") == "g"
    assert observed == []
    assert not registry.plugin_manager.is_registered(plugin)
    assert sibling.names() == ["g", "bash", "sib"]
    assert text(sibling.execute_sync(call("sib"))) == "Error: sibling guard"

    scope.close()  # closing twice is harmless
    assert registry.names() == ["g", "bash"]


def test_get_resolves_exactly_like_execution(registry: ToolRegistry) -> None:
    """B029: shadowing and restrictions both apply to get()."""
    read = tool("read")
    bash = tool("bash")
    registry.register(read)
    registry.register(bash)
    scope = registry.scope("a")
    local_read = tool("read", "local read")
    scope.register(local_read)
    scope.restrict(deny=["bash"])

    assert scope.get("read") is local_read
    assert ran(scope, "read") == "local read"
    assert scope.get("bash") is None
    assert_unknown(scope.execute_sync(call("bash")), "bash")
    assert registry.get("read") is read
    assert registry.get("bash") is bash


def test_agent_ids_are_scope_paths(registry: ToolRegistry) -> None:
    seen: list[str | None] = []

    def execute(arguments: Any, context: ToolRunContext) -> str:
        seen.append(context.execution.agent)
        return "ok"

    registry.register(tool("who", execute=execute))
    nested = registry.scope("a").scope("b")

    assert registry.agent is None
    assert registry.scope("a").agent == "a"
    assert nested.agent == "a/b"
    assert repr(nested) == "<ToolScope 'a/b'>"

    registry.execute_sync(call("who"))
    registry.scope("a").execute_sync(call("who"))
    nested.execute_sync(call("who"))
    registry.execute_sync(call("who", agent="a/b"))
    assert seen == [None, "a", "a/b", "a/b"]


@pytest.mark.parametrize("key", ["", "a/b", None, 3])
def test_scope_keys_must_be_non_empty_strings_without_a_slash(
    registry: ToolRegistry, key: Any
) -> None:
    with pytest.raises(RegistrationError, match="scope key must be a non-empty string"):
        registry.scope(key)


# =========================================================================== §4 restrictions


def test_restrict_exists_only_on_scopes(registry: ToolRegistry) -> None:
    """B030, our answer: a registry-wide restriction is not expressible at all."""
    assert not hasattr(registry, "restrict")
    assert callable(registry.scope("a").restrict)


def test_an_empty_filter_is_rejected(registry: ToolRegistry) -> None:
    """B031."""
    registry.register(tool("a"))
    with pytest.raises(RegistrationError, match=r"restrict\(\) needs allow and/or deny"):
        registry.scope("s").restrict()
    assert registry.scope("s").names() == ["a"]


def test_empty_allow_hides_everything_inherited_and_empty_deny_nothing(
    registry: ToolRegistry,
) -> None:
    """B032."""
    registry.register(tool("a"))
    registry.register(tool("b"))
    hidden = registry.scope("hidden")
    hidden.register(tool("own"))
    hidden.restrict(allow=[])
    open_scope = registry.scope("open")
    open_scope.restrict(deny=[])

    assert hidden.names() == ["own"]
    assert open_scope.names() == ["a", "b"]


def test_unknown_names_are_rejected_with_the_inherited_names(registry: ToolRegistry) -> None:
    """B034: one or several unknown names; the known list sorted, or ``(none)``."""
    registry.register(tool("real"))
    registry.register(tool("alpha"))
    scope = registry.scope("s")

    with pytest.raises(RegistrationError) as one:
        scope.restrict(allow=["reall"])
    assert str(one.value) == (
        'restrict() names unknown inherited tool "reall"; tools this scope inherits: alpha, real'
    )

    with pytest.raises(RegistrationError) as several:
        scope.restrict(allow=["wraith", "real"], deny=["ghost"])
    assert str(several.value).startswith(
        'restrict() names unknown inherited tools "ghost", "wraith"; '
    )

    with pytest.raises(RegistrationError, match=r"tools this scope inherits: \(none\)$"):
        ToolRegistry().scope("s").restrict(deny=["x"])
    assert scope.names() == ["real", "alpha"]  # nothing was applied


def test_a_scopes_own_tool_is_unknown_to_its_own_restriction(registry: ToolRegistry) -> None:
    """B035: own tools are exempt, so naming one is a caller error."""
    registry.register(tool("real"))
    scope = registry.scope("s")
    scope.register(tool("local"))
    with pytest.raises(RegistrationError, match=r'unknown inherited tool "local"; .*: real$'):
        scope.restrict(allow=["local"])


def test_names_from_ancestor_scopes_count_as_inherited(registry: ToolRegistry) -> None:
    registry.scope("p").register(tool("parent-tool"))
    child = registry.scope("p").scope("c")
    child.restrict(deny=["parent-tool"])
    assert child.names() == []
    with pytest.raises(RegistrationError, match="unknown inherited tool"):
        registry.scope("other").restrict(deny=["parent-tool"])


def test_filter_names_are_compiled_at_restrict_time(registry: ToolRegistry) -> None:
    """B036."""
    for name in ("read", "bash", "web"):
        registry.register(tool(name))
    deny = ["bash"]
    allow = ["read", "bash"]
    denying = registry.scope("deny")
    denying.restrict(deny=deny)
    allowing = registry.scope("allow")
    allowing.restrict(allow=allow)

    deny.append("read")
    allow.append("web")

    assert denying.names() == ["read", "web"]
    assert allowing.names() == ["read", "bash"]


@pytest.mark.parametrize(
    ("allow", "deny", "visible"),
    [
        (["read", "bash"], None, ["read", "bash"]),
        (None, ["bash"], ["read", "web"]),
        (["read", "bash"], ["bash"], ["read"]),
        (["read"], ["read"], []),
    ],
)
def test_allow_and_deny_semantics(
    registry: ToolRegistry, allow: list[str] | None, deny: list[str] | None, visible: list[str]
) -> None:
    """B037: visible iff listed in allow (when given) and not in deny."""
    for name in ("read", "bash", "web"):
        registry.register(tool(name))
    scope = registry.scope("s")
    scope.restrict(allow=allow, deny=deny)
    assert scope.names() == visible
    assert registry.names() == ["read", "bash", "web"]


def test_deny_only_admits_later_tools_and_allow_list_excludes_them(
    registry: ToolRegistry,
) -> None:
    """B038: live semantics."""
    registry.register(tool("read"))
    registry.register(tool("bash"))
    denying = registry.scope("deny")
    denying.restrict(deny=["bash"])
    allowing = registry.scope("allow")
    allowing.restrict(allow=["read"])

    registry.register(tool("web"))
    registry.scope("parent-of-nothing")  # unrelated scopes do not matter

    assert denying.names() == ["read", "web"]
    assert ran(denying, "web") == "web"
    assert allowing.names() == ["read"]
    assert_unknown(allowing.execute_sync(call("web")), "web")


def test_own_tools_survive_the_scopes_allow_list(registry: ToolRegistry) -> None:
    """B039: including those registered after the restriction."""
    registry.register(tool("read"))
    registry.register(tool("bash"))
    scope = registry.scope("s")
    scope.restrict(allow=["read"])
    scope.register(tool("allowed-local"))

    assert scope.names() == ["read", "allowed-local"]
    assert ran(scope, "allowed-local") == "allowed-local"


def test_restrictions_intersect_and_lift_one_by_one(registry: ToolRegistry) -> None:
    """B040, B043: each disposer lifts only its own filter, idempotently."""
    for name in ("a", "b", "c"):
        registry.register(tool(name))
    scope = registry.scope("s")
    lift_allow = scope.restrict(allow=["a", "b"])
    lift_deny = scope.restrict(deny=["b"])
    assert scope.names() == ["a"]

    lift_allow()
    assert scope.names() == ["a", "c"]
    lift_allow()
    assert scope.names() == ["a", "c"]

    lift_deny()
    assert scope.names() == ["a", "b", "c"]


def test_identical_restrictions_are_lifted_exactly(registry: ToolRegistry) -> None:
    for name in ("a", "b"):
        registry.register(tool(name))
    scope = registry.scope("s")
    first = scope.restrict(deny=["b"])
    scope.restrict(deny=["b"])
    first()
    first()
    assert scope.names() == ["a"]


def test_restrictions_reach_ancestor_tools_and_descendant_scopes(
    registry: ToolRegistry,
) -> None:
    """B041: a child's deny hides a parent-registered tool; an ancestor's restriction
    reaches every nested scope; a child's never affects its parent."""
    registry.register(tool("read"))
    registry.register(tool("web"))
    parent = registry.scope("p")
    parent.register(tool("bash"))
    child = parent.scope("c")
    grandchild = child.scope("g")

    child.restrict(deny=["bash"])
    assert child.names() == ["read", "web"]
    assert grandchild.names() == ["read", "web"]
    assert parent.names() == ["read", "web", "bash"]
    assert ran(parent, "bash") == "bash"

    parent.restrict(deny=["web"])
    assert parent.names() == ["read", "bash"]
    assert child.names() == ["read"]
    assert grandchild.names() == ["read"]
    assert_unknown(grandchild.execute_sync(call("web")), "web")
    assert registry.names() == ["read", "web"]


def test_an_ancestor_restriction_does_not_filter_a_descendants_own_tool(
    registry: ToolRegistry,
) -> None:
    registry.register(tool("bash"))
    parent = registry.scope("p")
    parent.restrict(deny=["bash"])
    child = parent.scope("c")
    child.register(tool("bash", "child bash"))

    assert parent.names() == []
    assert ran(child, "bash") == "child bash"
    assert ran(child.scope("g"), "bash") == "child bash"


def test_a_restricted_away_tool_is_gone_for_that_scope_only(registry: ToolRegistry) -> None:
    """B042."""
    registry.register(tool("bash", is_concurrency_safe=lambda a: True))
    scope = registry.scope("s")
    scope.restrict(deny=["bash"])

    assert scope.get("bash") is None
    assert scope.schemas() == []
    assert_unknown(scope.execute_sync(call("bash")), "bash")
    assert scope.execution_mode(call("bash")) == "exclusive"

    assert registry.execution_mode(call("bash")) == "parallel"
    assert ran(registry, "bash") == "bash"
    assert ran(registry.scope("other"), "bash") == "bash"


@pytest.mark.parametrize(
    ("keyword", "value"),
    [("allow", "bash"), ("deny", "bash"), ("allow", {"bash": True}), ("deny", 3)],
)
def test_filters_must_be_lists_of_names(registry: ToolRegistry, keyword: str, value: Any) -> None:
    registry.register(tool("bash"))
    with pytest.raises(RegistrationError, match=rf"restrict\({keyword}=\.\.\.\) must be a list"):
        registry.scope("s").restrict(**{keyword: value})
    assert registry.scope("s").names() == ["bash"]


def test_filter_names_must_be_strings(registry: ToolRegistry) -> None:
    registry.register(tool("bash"))
    with pytest.raises(RegistrationError, match=r"must list tool names \(strings\), got \[3\]"):
        registry.scope("s").restrict(deny=["bash", 3])


def test_filters_accept_tuples_and_sets(registry: ToolRegistry) -> None:
    for name in ("a", "b", "c"):
        registry.register(tool(name))
    scope = registry.scope("s")
    scope.restrict(allow=("a", "b"), deny={"b"})
    assert scope.names() == ["a"]


# =========================================================================== §16 execution_mode


def classified(
    name: str, classifier: Callable[[Any], object], **fields: Any
) -> ToolDefinition[Any]:
    return tool(name, is_concurrency_safe=classifier, **fields)


def test_parallel_only_when_the_classifier_returns_exactly_true(registry: ToolRegistry) -> None:
    """B162, B163."""

    def boom(arguments: object) -> bool:
        raise RuntimeError("classifier crashed")

    registry.register(classified("safe", lambda a: True))
    registry.register(classified("by-mode", lambda a: a.get("mode") == "read"))
    registry.register(classified("truthy", lambda a: "yes"))
    registry.register(classified("one", lambda a: 1))
    registry.register(classified("raises", boom))
    registry.register(tool("plain"))

    assert registry.execution_mode(call("safe")) == "parallel"
    assert registry.execution_mode(call("by-mode", {"mode": "read"})) == "parallel"
    assert registry.execution_mode(call("by-mode", {"mode": "write"})) == "exclusive"
    assert registry.execution_mode(call("truthy")) == "exclusive"
    assert registry.execution_mode(call("one")) == "exclusive"
    assert registry.execution_mode(call("raises")) == "exclusive"
    assert registry.execution_mode(call("plain")) == "exclusive"
    assert registry.execution_mode(call("missing")) == "exclusive"


def test_typed_arguments_that_fail_validation_are_exclusive(registry: ToolRegistry) -> None:
    """B163: the classifier of a define_tool tool only ever sees valid arguments."""
    seen: list[object] = []

    def classifier(arguments: Any) -> bool:
        seen.append(arguments)
        return True

    registry.register(
        define_tool(
            name="typed",
            description="d",
            parameters={"path": {"type": "string", "required": True}},
            execute=lambda a, c: "",
            is_concurrency_safe=classifier,
        )
    )

    assert registry.execution_mode(call("typed", {"path": 3})) == "exclusive"
    assert registry.execution_mode(call("typed", {})) == "exclusive"
    assert seen == []
    assert registry.execution_mode(call("typed", {"path": "a"})) == "parallel"
    assert seen == [{"path": "a"}]


def test_a_raw_classifier_gets_the_arguments_unvalidated(registry: ToolRegistry) -> None:
    """B164."""
    seen: list[object] = []

    def classifier(arguments: object) -> bool:
        seen.append(arguments)
        return True

    registry.register(
        classified(
            "raw",
            classifier,
            parameters={"type": "object", "properties": {}, "additionalProperties": False},
        )
    )
    assert registry.execution_mode(call("raw", {"anything": 1})) == "parallel"
    assert seen == [{"anything": 1}]


def test_execution_mode_is_looked_up_through_the_callers_view(registry: ToolRegistry) -> None:
    """B166: shadowing, restrictions and routing decide which classifier answers."""
    registry.register(tool("x"))
    registry.register(classified("y", lambda a: True))
    scope = registry.scope("a")
    scope.register(classified("x", lambda a: True))
    scope.scope("b").restrict(deny=["y"])

    assert registry.execution_mode(call("x")) == "exclusive"
    assert scope.execution_mode(call("x")) == "parallel"
    assert registry.execution_mode(call("x", agent="a")) == "parallel"
    assert registry.execution_mode(call("x", agent="a/b")) == "parallel"
    assert scope.execution_mode(call("y")) == "parallel"
    assert scope.scope("b").execution_mode(call("y")) == "exclusive"
    assert registry.execution_mode(call("x", agent="elsewhere")) == "exclusive"


# =========================================================================== routing


def test_a_call_naming_another_agent_through_a_scope_is_rejected(
    registry: ToolRegistry,
) -> None:
    registry.register(tool("x"))
    scope = registry.scope("a")

    for agent in ("b", "a/b", "ab"):
        with pytest.raises(RegistrationError) as caught:
            scope.execute_sync(call("x", agent=agent))
        message = str(caught.value)
        assert f"names agent {agent!r}" in message
        assert "scope 'a'" in message
        with pytest.raises(RegistrationError, match="names agent"):
            scope.execution_mode(call("x", agent=agent))

    assert ran(scope, "x") == "x"
    assert not scope.execute_sync(call("x", agent="a")).is_error


def test_execute_rejects_what_is_not_a_call(registry: ToolRegistry) -> None:
    with pytest.raises(TypeError, match="execute\\(\\) expects a ToolExecutionInput, got dict"):
        registry.execute_sync({"call_id": "1", "name": "x"})  # type: ignore[arg-type]


def test_registry_routes_an_agent_call_through_the_scope_chain(registry: ToolRegistry) -> None:
    registry.register(tool("x", "global"))
    registry.scope("a").register(tool("x", "a"))
    registry.scope("a").scope("b").register(tool("only-b"))

    assert text(registry.execute_sync(call("x", agent="a/b"))) == "a"
    assert text(registry.execute_sync(call("only-b", agent="a/b"))) == "only-b"
    assert_unknown(registry.execute_sync(call("only-b", agent="a")), "only-b")
    assert text(registry.execute_sync(call("x", agent="never-created"))) == "global"


@pytest.mark.anyio
async def test_async_execute_through_a_scope_sets_the_agent(registry: ToolRegistry) -> None:
    seen: list[str | None] = []

    async def execute(arguments: Any, context: ToolRunContext) -> str:
        seen.append(context.execution.agent)
        return "async ok"

    registry.register(tool("x", execute=execute))
    nested = registry.scope("a").scope("b")

    result = await nested.execute(call("x"))
    assert text(result) == "async ok"
    assert seen == ["a/b"]
    assert text(await registry.execute(call("x", agent="a"))) == "async ok"
    assert seen == ["a/b", "a"]
    with pytest.raises(RegistrationError, match="names agent 'a'"):
        await nested.execute(call("x", agent="a"))


# =========================================================================== scoped policy


def test_guards_apply_to_their_scope_and_descendants(registry: ToolRegistry) -> None:
    registry.register(tool("x"))
    seen: list[tuple[str, str | None]] = []

    def recorder(label: str) -> Callable[[ToolExecution], None]:
        def guard(execution: ToolExecution) -> None:
            seen.append((label, execution.agent))

        return guard

    registry.guard(recorder("global"))
    registry.scope("a").guard(recorder("a"))

    for view in (
        registry,
        registry.scope("a"),
        registry.scope("a").scope("b"),
        registry.scope("z"),
    ):
        ran(view, "x")

    assert seen == [
        ("global", None),
        ("global", "a"),
        ("a", "a"),
        ("global", "a/b"),
        ("a", "a/b"),
        ("global", "z"),
    ]


def test_a_scoped_guard_denies_only_in_its_scope(registry: ToolRegistry) -> None:
    registry.register(tool("x"))
    dispose = registry.scope("a").guard(lambda execution: f"no {execution.name} for a")

    denied = registry.scope("a").scope("b").execute_sync(call("x"))
    assert denied.code == "DENIED"
    assert text(denied) == "Error: no x for a"
    assert ran(registry, "x") == "x"
    assert ran(registry.scope("b"), "x") == "x"

    dispose()
    dispose()
    assert ran(registry.scope("a"), "x") == "x"


def test_guard_disposers_remove_exactly_their_registration(registry: ToolRegistry) -> None:
    registry.register(tool("x"))
    calls: list[str] = []

    def guard(execution: ToolExecution) -> None:
        calls.append(execution.name)

    first = registry.guard(guard)
    registry.guard(guard)
    first()
    first()
    ran(registry, "x")
    assert calls == ["x"]


def test_guard_rejects_async_and_non_callables(registry: ToolRegistry) -> None:
    async def later(execution: ToolExecution) -> None:
        return None

    with pytest.raises(RegistrationError, match=r"guard 'test_guard_rejects.*later' is async"):
        registry.guard(later)  # type: ignore[arg-type]
    with pytest.raises(RegistrationError, match=r"guard\(\) expects a callable, got str"):
        registry.scope("a").guard("deny")  # type: ignore[arg-type]


def test_plugins_apply_to_their_scope_and_descendants(registry: ToolRegistry) -> None:
    """Global plugins see every call, agent-less ones included; scoped ones only theirs."""
    registry.register(tool("x"))
    seen: list[tuple[str, str | None]] = []

    class Observer:
        def __init__(self, label: str) -> None:
            self.label = label

        @hookimpl
        def dsh_tools_result(self, execution: ToolExecution) -> None:
            seen.append((self.label, execution.agent))

    class DenyAll:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> Deny:
            return Deny(f"sandboxed agent {execution.agent}")

    registry.add_plugin(Observer("global"))
    registry.scope("a").add_plugin(Observer("a"))
    registry.scope("sandbox").add_plugin(DenyAll())

    ran(registry, "x")
    ran(registry.scope("a").scope("b"), "x")
    ran(registry.scope("c"), "x")
    denied = registry.scope("sandbox").scope("inner").execute_sync(call("x"))

    assert text(denied) == "Error: sandboxed agent sandbox/inner"
    assert seen == [
        ("global", None),
        ("a", "a/b"),
        ("global", "a/b"),
        ("global", "c"),
        ("global", "sandbox/inner"),
    ]


def test_a_scope_keeps_its_plugins_until_the_last_one_is_removed(
    registry: ToolRegistry,
) -> None:
    """Two plugins in one scope: removing one leaves the other seeing that scope's calls
    (and its descendants'); once both are removed, neither sees them."""
    registry.register(tool("x"))
    seen: list[str] = []

    class Observer:
        def __init__(self, label: str) -> None:
            self.label = label

        @hookimpl
        def dsh_tools_result(self, execution: ToolExecution) -> None:
            seen.append(self.label)

    scope = registry.scope("a")
    first = scope.add_plugin(Observer("first"))
    second = scope.add_plugin(Observer("second"))
    first()
    ran(scope.scope("b"), "x")
    assert seen == ["second"]
    second()
    ran(scope.scope("b"), "x")
    assert seen == ["second"]


def test_scoped_execute_wrappers_wrap_only_their_scope(registry: ToolRegistry) -> None:
    registry.register(tool("x"))

    class ShortCircuit:
        @hookimpl(wrapper=True)
        def dsh_tools_execute(self, execution: ToolExecution) -> Any:
            yield

            async def dispatch(signal: object = None) -> ToolExecutionResult:
                return failure_result(f"cached for {execution.agent}", "CACHED")

            return dispatch

    class Counter:
        def __init__(self) -> None:
            self.count = 0

        @hookimpl(wrapper=True)
        def dsh_tools_execute(self, execution: ToolExecution) -> Any:
            self.count += 1
            return (yield)

    counter = Counter()
    registry.add_plugin(counter)
    registry.scope("a").add_plugin(ShortCircuit())

    assert text(registry.scope("a").scope("b").execute_sync(call("x"))) == "Error: cached for a/b"
    assert ran(registry, "x") == "x"
    assert ran(registry.scope("b"), "x") == "x"
    assert counter.count == 3


def test_a_dataclass_plugin_is_refused_in_scopes_and_globally_alike(
    registry: ToolRegistry,
) -> None:
    """pluggy keeps plugins in a set (``get_plugins``) and tells them apart with ``==``, so
    an unhashable plugin breaks it wherever it is registered; an eq=False one is fine."""
    import dataclasses

    registry.register(tool("x"))

    @dataclasses.dataclass
    class Policy:
        reason: str

        @hookimpl
        def dsh_tools_guard(self, execution: ToolExecution) -> str:
            return self.reason

    for view in (registry, registry.scope("a")):
        with pytest.raises(
            RegistrationError, match=r"plugin '.*Policy' is invalid: it is unhashable.*eq=False"
        ):
            view.add_plugin(Policy("no"))
    with pytest.raises(pluggy.PluginValidationError, match="unhashable"):
        registry.plugin_manager.register(Policy("no"))
    assert ran(registry, "x") == "x"

    @dataclasses.dataclass(eq=False)
    class ByIdentity:
        reason: str

        @hookimpl
        def dsh_tools_guard(self, execution: ToolExecution) -> str:
            return self.reason

    registry.scope("a").add_plugin(ByIdentity("scoped no"))
    assert text(registry.scope("a").execute_sync(call("x"))) == "Error: scoped no"
    assert ran(registry, "x") == "x"
    assert len(registry.plugin_manager.get_plugins()) == 1


# =========================================================================== execute_sync parity


class AsyncCallableBody:
    async def __call__(self, arguments: Any, context: ToolRunContext) -> str:
        return "async callable"


@pytest.mark.anyio
async def test_execute_awaits_a_body_whose_call_is_async(registry: ToolRegistry) -> None:
    registry.register(tool("x", execute=AsyncCallableBody()))
    assert text(await registry.execute(call("x"))) == "async callable"


def test_execute_sync_awaits_a_body_whose_call_is_async(registry: ToolRegistry) -> None:
    registry.register(tool("x", execute=AsyncCallableBody()))
    result = registry.execute_sync(call("x"))
    assert text(result) == "async callable"


def test_execute_sync_awaits_a_decision_returned_as_an_awaitable(registry: ToolRegistry) -> None:
    registry.register(tool("x"))

    class DeferredDeny:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> Any:
            async def decide() -> Deny:
                return Deny("decided later")

            return decide()

    registry.add_plugin(DeferredDeny())
    result = registry.execute_sync(call("x"))
    assert result.code == "DENIED"


def test_execute_sync_awaits_an_approval_returned_as_an_awaitable() -> None:
    from dsh_tools._models import ApprovalOutcome, ApprovalRequest, Ask

    class Service:
        def request(self, request: ApprovalRequest) -> Any:
            async def answer() -> ApprovalOutcome:
                return ApprovalOutcome.ALLOWED_ONCE

            return answer()

    class AskAlways:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> Ask:
            return Ask("may I?")

    registry = ToolRegistry(approval=Service())
    registry.register(tool("x"))
    registry.add_plugin(AskAlways())
    result = registry.scope("a").execute_sync(call("x"))
    assert text(result) == "x"


# =========================================================================== registry settings


def test_replacing_the_approval_service_applies_to_the_next_call() -> None:
    """B071 through the registry: the service is not frozen into cached plans."""
    from dsh_tools._models import ApprovalOutcome, ApprovalRequest, Ask

    class Service:
        def request(self, request: ApprovalRequest) -> ApprovalOutcome:
            return ApprovalOutcome.ALLOWED_ONCE

    class AskAlways:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> Ask:
            return Ask("needs a person")

    registry = ToolRegistry(approval=Service())
    registry.register(tool("x"))
    registry.add_plugin(AskAlways())
    scope = registry.scope("a")
    assert ran(scope, "x") == "x"

    registry.approval = None
    denied = scope.execute_sync(call("x"))
    assert (denied.code, text(denied)) == ("DENIED", "Error: needs a person")

    registry.approval = Service()
    assert ran(scope, "x") == "x"


def test_changing_the_default_timeout_applies_to_the_next_call(registry: ToolRegistry) -> None:
    import anyio

    async def slow(arguments: Any, context: ToolRunContext) -> str:
        await anyio.sleep(5)
        return "slow"

    registry.register(tool("slow", execute=slow))
    registry.register(tool("fast"))
    assert ran(registry, "fast") == "fast"  # caches a plan without a timeout

    registry.default_timeout_ms = 10
    result = registry.execute_sync(call("slow"))
    assert result.code == "TOOL_TIMEOUT"
    assert registry.default_timeout_ms == 10


@pytest.mark.parametrize("timeout_ms", [0, -1, math.inf, math.nan, True, "10"], ids=repr)
def test_the_default_timeout_must_be_positive_and_finite(timeout_ms: Any) -> None:
    with pytest.raises(DefinitionError, match="default_timeout_ms must be a positive finite"):
        ToolRegistry(default_timeout_ms=timeout_ms)
    registry = ToolRegistry(default_timeout_ms=50)
    with pytest.raises(DefinitionError, match="default_timeout_ms must be a positive finite"):
        registry.default_timeout_ms = timeout_ms
    assert registry.default_timeout_ms == 50


@pytest.mark.parametrize("agent", ["a//b", "a/", "/a", ""])
def test_a_malformed_agent_id_is_refused_clearly(registry: ToolRegistry, agent: str) -> None:
    registry.register(tool("x"))
    registry.scope("a").register(tool("y"))
    with pytest.raises(RegistrationError, match="malformed"):
        registry.execute_sync(ToolExecutionInput("c", "x", {}, agent=agent))
    assert registry.execution_mode(ToolExecutionInput("c", "x", {}, agent=agent)) == "exclusive"
    assert registry.definition_for("y", agent) is None


def test_definition_for_resolves_like_execution(registry: ToolRegistry) -> None:
    registry.register(tool("x"))
    scoped = tool("x")
    registry.scope("a").register(scoped)
    assert registry.definition_for("x", "a/b") is scoped
    assert registry.definition_for("x") is registry.get("x")
    assert registry.scope("a").definition_for("x", "other") is None
    assert registry.scope("a").definition_for("x") is scoped


@pytest.mark.parametrize("field", ["parameters", "metadata"])
def test_a_raw_definition_with_non_json_data_is_refused_naming_the_tool(field: str) -> None:
    import math

    from dsh_tools._models import ToolDefinition

    bad = {"type": "object", "properties": {"n": {"type": "number", "default": math.nan}}}
    fields: dict[str, Any] = {"parameters": {"type": "object"}, field: bad}
    with pytest.raises(JsonValueError) as caught:
        ToolDefinition(name="nan_tool", description="d", execute=lambda a, c: 1, **fields)
    message = str(caught.value)
    assert message.startswith(f'tool "nan_tool": {field}: ')
    assert "is NaN" in message


def test_a_classifier_that_raises_a_base_exception_is_exclusive(registry: ToolRegistry) -> None:
    # The classifier is a tool's code: contained like every other, as BaseException.
    def exits(arguments: object) -> bool:
        raise SystemExit("a classifier that exits")

    registry.register(classified("exits", exits))
    assert registry.execution_mode(call("exits")) == "exclusive"


# --------------------------------------------------------------------------- plans


def test_agents_without_registrations_of_their_own_keep_nothing_per_agent() -> None:
    import gc
    import tracemalloc

    registry = ToolRegistry()
    registry.register(tool("echo"))
    team = registry.scope("team")
    team.guard(lambda execution: "no" if execution.agent == "team/blocked" else None)

    def through(key: str) -> ToolExecutionResult:
        return team.scope(key).execute_sync(call("echo"))

    for n in range(50):
        assert through(f"warm-{n}").text == "echo"
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for n in range(300):  # an agent per request, as an MCP client without a token is
        assert through(f"client-{n}").text == "echo"
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    kept = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert kept < 300 * 100, f"{kept / 300:.0f} bytes kept per agent"
    assert through("blocked").code == "DENIED"  # the team's guard reaches every agent


def test_a_scope_that_registers_later_gets_its_own_view() -> None:
    registry = ToolRegistry()
    registry.register(tool("echo", "global"))
    first, second = registry.scope("a").scope("one"), registry.scope("a").scope("two")
    assert first.execute_sync(call("echo")).text == "global"
    first.register(tool("echo", "one's own"))
    assert first.execute_sync(call("echo")).text == "one's own"
    assert second.execute_sync(call("echo")).text == "global"
    assert registry.scope("a").scope("one").get("echo") is not None
    assert first.names() == ["echo"]


@pytest.mark.anyio
async def test_a_call_in_flight_finds_a_tool_its_own_scope_registered_meanwhile() -> None:
    import anyio

    entered, go = anyio.Event(), anyio.Event()

    class Waits:
        @hookimpl
        async def dsh_tools_pre_execute(self) -> None:
            entered.set()
            await go.wait()

    registry = ToolRegistry()
    registry.register(tool("echo", "global"))
    registry.add_plugin(Waits())
    scope = registry.scope("client-7")  # no registrations: it runs the registry's plan
    results: list[ToolExecutionResult] = []

    async def run() -> None:
        results.append(await scope.execute(call("echo")))

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await entered.wait()
        scope.register(tool("echo", "client-7's own"))
        go.set()
    assert results[0].text == "client-7's own"  # resolved late, through its own scope
