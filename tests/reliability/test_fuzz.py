"""Fuzzing: nothing a model, a plugin or a card payload sends can crash the pipeline.

Invariants checked on random input:

* ``execute`` / ``execute_sync`` always return a frozen result whose ``content`` is a
  ``FrozenList`` and whose ``result_to_json`` survives ``json.dumps`` (and ``json.loads``);
  no exception escapes (native cancellation is covered by the concurrency suite);
* random DSL specs and raw schemas either compile or raise ``JsonSchemaError`` (never
  anything else), and a compiled validator returns a list of strings for any value;
* random pre/guard/post/wrapper decisions, valid or not, never crash a call, and a denial
  (pre-execute ``Deny`` or a guard reason) always keeps the body from running; the junk
  includes objects equal to everything whose hash, repr and truth value raise, and the
  raised errors include exceptions that are no ``Exception`` (``SystemExit``,
  ``GeneratorExit``, a stray ``CancelledError``, a home-made one); observers run once;
* random card JSON either structures into a card or raises ``CardError``;
* 100 000 levels of nesting and 10 MB arguments end cleanly in bounded time and memory;
* catastrophic regexes and globs (nested quantifiers, ``*a*a*a*b``) given to ``grep`` and
  ``glob`` end within the time bound, as a result or an ``INVALID_ARGS`` failure.

Hypothesis profiles (registered here, applied per test, so other modules are unaffected):
``ci`` (the default) and ``long`` (5000 examples per property). The long run::

    DSH_TOOLS_FUZZ_PROFILE=long python -m pytest tests/reliability/test_fuzz.py

The suite prints how many examples each property ran when the module finishes.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import anyio
import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from card_strategies import call_views, result_views
from dsh_tools import (
    Accept,
    Allow,
    ApprovalOutcome,
    Ask,
    Block,
    Deny,
    ToolExecutionInput,
    ToolRegistry,
    define_tool,
    hookimpl,
)
from dsh_tools._content import ContextMessage, TextContent
from dsh_tools._json import FrozenDict, FrozenList, dumps, loads, snapshot, thaw
from dsh_tools._models import (
    ToolDefinition,
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionResult,
    ToolExecutionSuccess,
    ToolOutput,
    result_to_json,
)
from dsh_tools._schema.dsl import schema_spec_to_json_schema, value_spec_to_json_schema
from dsh_tools._schema.subset import assert_supported_json_schema, compile_validator
from dsh_tools.errors import (
    DshToolsError,
    ErrorCode,
    JsonSchemaError,
    JsonValueError,
    ToolArgsError,
)
from dsh_tools.presentation import (
    CardError,
    structure_call_view,
    structure_result_view,
    unstructure_view,
)
from dsh_tools_plugins._search.regex import compile_line_pattern
from dsh_tools_plugins.audit import AuditLog, read_audit_log
from dsh_tools_plugins.permissions import PermissionRules
from dsh_tools_plugins.tools import workspace_tools
from strategies import (
    AgreesWithEverything,
    any_values,
    dsl_parameter_specs,
    json_values,
    raw_schemas,
)

settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "long",
    max_examples=5000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROFILE = os.environ.get("DSH_TOOLS_FUZZ_PROFILE", "ci")
FUZZ = settings(settings.get_profile(PROFILE))
"""Decorator applying the selected profile to one test (``settings.load_profile`` would
change every other module's defaults too)."""

DEEP = 100_000
TEN_MB = 10 * 1024 * 1024
TIME_BOUND_S = 5.0
MEMORY_BOUND = 200 * 1024 * 1024
CODES = {code.value for code in ErrorCode}

COUNTS: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _report_counts(request: pytest.FixtureRequest) -> Iterator[None]:
    """Print the number of examples each property ran (visible without ``-s``)."""
    yield
    summary = ", ".join(f"{name}={count}" for name, count in sorted(COUNTS.items()))
    report_line(request, f"[reliability/fuzz] profile={PROFILE}: {summary}")


def report_line(request: pytest.FixtureRequest, line: str) -> None:
    """Write ``line`` to the terminal even while output is captured."""
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if capture is None or reporter is None:  # pragma: no cover - plugins disabled
        print(line)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(line)


# --------------------------------------------------------------------------- invariants


def assert_clean(result: object) -> dict[str, Any]:
    """The pipeline's promise for every call: a frozen, JSON-serializable result."""
    assert isinstance(result, (ToolExecutionSuccess, ToolExecutionFailure)), result
    assert type(result.content) is FrozenList
    for block in result.content:
        assert type(block) is FrozenDict
        assert isinstance(block["type"], str)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        result.content = FrozenList()  # type: ignore[misc]
    data = result_to_json(result)
    text = json.dumps(data, allow_nan=False)
    assert json.loads(text) == data
    if isinstance(result, ToolExecutionFailure):
        assert result.code in CODES or result.code.isupper(), result.code
        assert isinstance(result.error.message, str)
    else:
        snapshot(result.value)  # still lossless JSON
    return data


@attrs.frozen
class _Bounded:
    seconds: float
    peak: int


def bounded(action: Callable[[], object]) -> tuple[object, _Bounded]:
    """Run ``action`` twice: timed (perf_counter), then traced (tracemalloc peak).

    tracemalloc slows allocation-heavy code several times over, so time is measured on
    the untraced run. Returns what the traced run returned, with both measurements.
    """
    started = time.perf_counter()
    action()
    elapsed = time.perf_counter() - started
    tracemalloc.start()
    try:
        value = action()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < TIME_BOUND_S, f"took {elapsed:.2f} s"
    assert peak < MEMORY_BOUND, f"peak {peak / 2**20:.0f} MB"
    return value, _Bounded(elapsed, peak)


def _outcome(action: Callable[[], Any]) -> tuple[Any, Exception | None]:
    """``(value, None)`` or ``(None, the exception)``: asserts stay outside ``except``."""
    try:
        return action(), None
    except Exception as error:
        return None, error


def deep_list(depth: int) -> list[Any]:
    root: list[Any] = []
    node = root
    for _ in range(depth - 1):
        child: list[Any] = []
        node.append(child)
        node = child
    return root


def deep_dict(depth: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(depth - 1):
        child: dict[str, Any] = {}
        node["a"] = child
        node = child
    return root


# --------------------------------------------------------------------------- strategies


class _Hostile:
    """Every dunder a walker might call raises."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq")

    __hash__ = object.__hash__

    def __iter__(self) -> Iterator[Any]:
        raise RuntimeError("iter")

    def __len__(self) -> int:
        raise RuntimeError("len")

    def __repr__(self) -> str:
        return "<hostile>"


class _Escaped(BaseException):
    """A home-made ``BaseException``, as some libraries raise for their own control flow."""


class _Unprintable:
    """A decision whose ``repr`` and ``str`` raise."""

    def __repr__(self) -> str:
        raise RuntimeError("repr")

    __str__ = __repr__


class _LyingStr(str):
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq")

    __hash__ = str.__hash__


class _LyingDict(dict):  # type: ignore[type-arg]
    def items(self) -> Any:
        raise RuntimeError("items")

    def keys(self) -> Any:
        raise RuntimeError("keys")

    def __iter__(self) -> Iterator[Any]:
        raise RuntimeError("iter")


class _LyingList(list):  # type: ignore[type-arg]
    def __iter__(self) -> Iterator[Any]:
        raise RuntimeError("iter")

    def __len__(self) -> int:
        raise RuntimeError("len")


EDGE_SCALARS = st.sampled_from(
    [
        "\ud800",  # a lone surrogate: a str, but not encodable as UTF-8
        "\x00",
        "😀" * 3,
        -0.0,
        1e308,
        5e-324,
        2.0,
        2**63,
        -(2**64),
        True,
        False,
    ]
) | st.integers(min_value=-(10**4000), max_value=10**4000)
"""Integers past the 4300-digit conversion limit are tested without Hypothesis (below),
which cannot print them in a failure report."""
HOSTILE = (
    st.builds(_Hostile)
    | st.builds(AgreesWithEverything)
    | st.builds(_LyingStr, st.just("x"))
    | st.builds(lambda: _LyingDict(a=1))
    | st.builds(lambda: _LyingList([1]))
)


def argument_values() -> st.SearchStrategy[Any]:
    """What a model (or a buggy host) may pass as ``arguments``: anything at all."""
    leaves = EDGE_SCALARS | HOSTILE
    tricky = st.recursive(
        leaves | json_values(4),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
        max_leaves=6,
    )
    objects = st.dictionaries(st.text(max_size=4), any_values(6) | tricky, max_size=4)
    return objects | json_values(8) | any_values(8) | tricky


def junk_specs() -> st.SearchStrategy[Any]:
    """Spec-shaped garbage: schema keywords with random values, at random nesting."""
    words = st.sampled_from(
        [
            "type",
            "oneOf",
            "enum",
            "const",
            "items",
            "properties",
            "additionalProperties",
            "required",
            "description",
            "title",
            "default",
            "examples",
            "format",
            "$ref",
            "minimum",
        ]
    )
    types = st.sampled_from(
        ["string", "number", "integer", "boolean", "null", "array", "object", "json", "any"]
    )
    leaves = types | any_values(3) | HOSTILE | st.lists(types, max_size=3)
    return st.recursive(
        leaves,
        lambda inner: (
            st.dictionaries(words | st.text(max_size=3), inner, max_size=4)
            | st.lists(inner, max_size=3)
        ),
        max_leaves=12,
    )


def _mutate(data: Any, draw: st.DrawFn) -> Any:
    """Replace, drop or add one member somewhere in a JSON tree."""
    if isinstance(data, dict) and data and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(data)))
        copy = dict(data)
        action = draw(st.sampled_from(["replace", "drop", "add", "recurse"]))
        if action == "replace":
            copy[key] = draw(json_values(4) | EDGE_SCALARS)
        elif action == "drop":
            del copy[key]
        elif action == "add":
            copy[draw(st.text(max_size=6))] = draw(json_values(3))
        else:
            copy[key] = _mutate(copy[key], draw)
        return copy
    if isinstance(data, list) and data and draw(st.booleans()):
        index = draw(st.integers(0, len(data) - 1))
        copy_list = list(data)
        copy_list[index] = _mutate(copy_list[index], draw)
        return copy_list
    return draw(json_values(4) | EDGE_SCALARS | any_values(3))


@st.composite
def card_payloads(draw: st.DrawFn) -> tuple[str, Any]:
    """(``call``/``result``, data): valid cards, mutated cards, and plain garbage."""
    which = draw(st.sampled_from(["call", "result"]))
    view = draw(call_views if which == "call" else result_views)
    data = unstructure_view(view)
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return which, data
    if choice == 3:
        return which, draw(any_values(6) | json_values(6))
    for _ in range(choice):
        data = _mutate(data, draw)
    return which, data


# --------------------------------------------------------------------------- arguments


def _echo(args: Any, ctx: Any) -> Any:
    return {"echo": thaw(args)}


@FUZZ
@given(spec=dsl_parameter_specs(), arguments=argument_values())
def test_execute_returns_a_clean_result_for_any_arguments(
    spec: dict[str, Any], arguments: Any
) -> None:
    COUNTS["arguments"] += 1
    registry = ToolRegistry()
    registry.register(define_tool(name="t", description="d", parameters=spec, execute=_echo))
    raw = ToolDefinition(name="raw", description="raw", parameters={}, execute=_echo)
    registry.register(raw)
    for name in ("t", "raw", "missing"):
        result = registry.execute_sync(ToolExecutionInput("c", name, arguments))
        data = assert_clean(result)
        if isinstance(result, ToolExecutionSuccess):
            assert data["value"] == {"echo": thaw(snapshot(arguments))}
        if name == "missing" and result.is_error:
            assert result.code in ("UNKNOWN_TOOL", "INVALID_JSON")


@FUZZ
@given(arguments=argument_values(), backend=st.sampled_from(["asyncio", "trio"]))
def test_async_execute_returns_a_clean_result_for_any_arguments(
    arguments: Any, backend: str
) -> None:
    COUNTS["arguments_async"] += 1

    async def body(args: Any, ctx: Any) -> Any:
        await anyio.sleep(0)
        return _echo(args, ctx)

    registry = ToolRegistry()
    registry.register(define_tool(name="t", description="d", parameters={}, execute=body))
    result = anyio.run(registry.execute, ToolExecutionInput("c", "t", arguments), backend=backend)
    assert_clean(result)


@FUZZ
@given(value=argument_values())
def test_body_returning_anything_gives_a_clean_result(value: Any) -> None:
    COUNTS["body_values"] += 1
    registry = ToolRegistry()
    registry.register(
        define_tool(name="plain", description="d", parameters={}, execute=lambda a, c: value)
    )
    registry.register(
        define_tool(
            name="declared",
            description="d",
            parameters={},
            execute=lambda a, c: value,
            output=ToolOutput({}, lambda args, v: dumps(v), lambda args, v: v),
        )
    )
    registry.register(
        define_tool(
            name="finalized",
            description="d",
            parameters={},
            execute=lambda a, c: "ok",
            # top-level iteration of a hostile object: see the next test
            finalize_content=lambda execution, result: [value],
        )
    )
    for name in ("plain", "declared", "finalized"):
        assert_clean(registry.execute_sync(ToolExecutionInput("c", name, {})))


def test_finalize_content_returning_an_unreadable_sequence_is_a_clean_failure() -> None:
    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="finalized",
            description="d",
            parameters={},
            execute=lambda a, c: "ok",
            finalize_content=lambda execution, result: _LyingList(["x"]),
        )
    )
    result = registry.execute_sync(ToolExecutionInput("c", "finalized", {}))
    assert isinstance(result, ToolExecutionFailure)
    assert_clean(result)


HUGE = 10**5000
"""An int past the interpreter's 4300-digit text limit: ``json.dumps`` raises on it."""


def test_integers_too_long_for_json_text_are_not_json() -> None:
    COUNTS["huge_ints"] += 1

    class Replace:
        @hookimpl
        def dsh_tools_post_execute(
            self, execution: ToolExecution, result: ToolExecutionResult
        ) -> object:
            return Accept(value={"n": HUGE})

    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="declared",
            description="d",
            parameters={},
            execute=lambda a, c: {"n": HUGE},
            output=ToolOutput({}, lambda args, v: "rendered", lambda args, v: v),
        )
    )
    registry.register(
        define_tool(name="plain", description="d", parameters={}, execute=lambda a, c: [HUGE])
    )
    scoped = registry.scope("replace")
    scoped.register(define_tool(name="ok", description="d", parameters={}, execute=lambda a, c: 1))
    scoped.add_plugin(Replace())
    results = [
        registry.execute_sync(ToolExecutionInput("c", "declared", {})),
        registry.execute_sync(ToolExecutionInput("c", "plain", {})),
        registry.execute_sync(ToolExecutionInput("c", "plain", {"n": -HUGE})),
        scoped.execute_sync(ToolExecutionInput("c", "ok", {})),
    ]
    assert [result.is_error for result in results] == [True] * 4
    assert [result.code for result in results] == [  # type: ignore[union-attr]
        "INVALID_TOOL_OUTPUT",
        "INVALID_TOOL_OUTPUT",
        "INVALID_JSON",
        "POLICY_ERROR",  # Accept(value=...) raised JsonValueError inside the plugin
    ]
    for result in results:
        assert_clean(result)
    for value in (HUGE, [HUGE], {"a": -HUGE}):
        with pytest.raises(JsonValueError, match="too long for JSON text"):
            snapshot(value)
        with pytest.raises(JsonValueError):
            dumps(value)
    for schema in ({}, {"type": "array"}, {"type": "object"}):
        assert compile_validator(schema)({"a": [HUGE]}) != [], schema
    assert compile_validator({})(HUGE) == ['"value" must be a lossless JSON value']
    with pytest.raises(JsonSchemaError):
        assert_supported_json_schema({"type": "integer", "enum": [HUGE]})
    with pytest.raises(CardError):
        structure_result_view({"card": "web", "kind": "fetch", "url": "u", "statusCode": HUGE})
    assert snapshot(SMALLEST_UNSAFE - 1) == SMALLEST_UNSAFE - 1


SMALLEST_UNSAFE = 10**4300
"""The smallest int the default limit refuses to print (4301 digits)."""


# --------------------------------------------------------------------------- schemas


@FUZZ
@given(schema=raw_schemas(), value=argument_values())
def test_compiled_validators_return_a_list_for_any_value(schema: Any, value: Any) -> None:
    COUNTS["validators"] += 1
    for root in ("value", ""):
        found = compile_validator(schema, root=root)(value)
        assert isinstance(found, list)
        assert all(isinstance(line, str) for line in found)


@FUZZ
@given(spec=junk_specs(), value=argument_values())
def test_random_specs_and_schemas_compile_or_raise_json_schema_error(spec: Any, value: Any) -> None:
    COUNTS["junk_specs"] += 1
    for compile_spec in (schema_spec_to_json_schema, value_spec_to_json_schema):
        compiled, error = _outcome(lambda: compile_spec(spec))  # noqa: B023
        if error is None:
            assert isinstance(compiled, FrozenDict)
            assert isinstance(compile_validator(compiled)(value), list)
        else:
            assert isinstance(error, JsonSchemaError), repr(error)
            assert error.violations
    _, error = _outcome(lambda: assert_supported_json_schema(spec))
    if error is None:
        assert isinstance(compile_validator(spec)(value), list)
    else:
        assert isinstance(error, JsonSchemaError), repr(error)
        assert error.violations
    try:
        tool = define_tool(name="t", description="d", parameters=spec, execute=_echo)
    except DshToolsError:
        return
    registry = ToolRegistry()
    registry.register(tool)
    assert_clean(registry.execute_sync(ToolExecutionInput("c", "t", value)))


# --------------------------------------------------------------------------- decisions


class _Raise:
    """Marks "this hook raises" in a drawn decision list."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __repr__(self) -> str:
        return f"raise {self.error!r}"


ERRORS = st.sampled_from(
    [
        ValueError("v"),
        RuntimeError(""),
        KeyError("k"),
        DshToolsError("coded"),
        TypeError(),
        # Not Exceptions: contained all the same (issue 16).
        SystemExit(2),
        GeneratorExit(),
        _Escaped("escape"),
        # Nobody cancelled the caller (Python 3.10 cannot tell, and lets it propagate).
        *([asyncio.CancelledError()] if sys.version_info >= (3, 11) else []),
    ]
).map(_Raise)
JUNK = (
    any_values(3)
    | st.sampled_from([Allow, Deny, Accept, object()])
    | st.builds(_Hostile)
    | st.builds(AgreesWithEverything)
)
CONTEXTS = st.lists(
    st.builds(
        lambda text: ContextMessage(id="m", content=text, source="fuzz"), st.text(max_size=5)
    ),
    max_size=2,
)
PRE = st.one_of(
    st.none(),
    st.just(Allow()),
    st.builds(Deny, st.text(max_size=8)),
    st.builds(Ask, st.none() | st.text(max_size=8)),
    JUNK,
    ERRORS,
)
GUARD = st.none() | st.text(max_size=8) | JUNK | ERRORS
CONTENT = st.text(max_size=8) | st.lists(
    st.text(max_size=5) | st.builds(TextContent, st.text(max_size=5)), max_size=2
)


@st.composite
def post_decisions(draw: st.DrawFn) -> object:
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return None
    if kind == 1:
        return Accept(content=draw(CONTENT), additional_contexts=draw(CONTEXTS))
    if kind == 2:
        value = draw(argument_values())
        try:
            return Accept(value=value)
        except (JsonValueError, TypeError, ValueError) as error:
            return _Raise(error)  # a plugin building a bad decision raises inside its hook
    if kind == 3:
        return Block(draw(CONTENT), additional_contexts=draw(CONTEXTS))
    if kind == 4:
        return draw(ERRORS)
    return draw(JUNK)


WRAPPERS = st.sampled_from(
    ["pass", "twice", "short_success", "short_junk", "short_hostile", "raise", "exit", "none"]
)


def _act(decision: object) -> object:
    if isinstance(decision, _Raise):
        raise decision.error
    return decision


def _decision_plugin(
    pre: object, guard: object, post: object, wrapper: str, is_async: bool, seen: list[str]
) -> object:
    if is_async:

        class AsyncPolicy:
            @hookimpl
            async def dsh_tools_pre_execute(self, execution: ToolExecution) -> object:
                await anyio.sleep(0)
                return _act(pre)

            @hookimpl
            async def dsh_tools_post_execute(
                self, execution: ToolExecution, result: ToolExecutionResult
            ) -> object:
                return _act(post)

            @hookimpl
            async def dsh_tools_result(
                self, execution: ToolExecution, result: ToolExecutionResult
            ) -> None:
                seen.append("result")
                _act(guard)  # observers may raise too: contained

        return AsyncPolicy()

    class Policy:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> object:
            return _act(pre)

        @hookimpl
        def dsh_tools_guard(self, execution: ToolExecution) -> object:
            return _act(guard)

        @hookimpl
        def dsh_tools_post_execute(
            self, execution: ToolExecution, result: ToolExecutionResult
        ) -> object:
            return _act(post)

        @hookimpl(wrapper=True)
        def dsh_tools_execute(self, execution: ToolExecution) -> Any:
            dispatch = yield
            if wrapper == "pass":
                return dispatch
            if wrapper == "none":
                return None

            async def wrapped(signal: Any = None) -> Any:
                if wrapper == "twice":
                    await dispatch(signal)
                    return await dispatch(signal)
                if wrapper == "short_success":
                    return ToolExecutionSuccess(value="short", content="short")
                if wrapper == "short_junk":
                    return {"not": "a result"}
                if wrapper == "short_hostile":
                    return AgreesWithEverything()
                if wrapper == "exit":
                    raise SystemExit(1)
                raise RuntimeError("wrapper broke")

            return wrapped

        @hookimpl
        def dsh_tools_result(self, execution: ToolExecution, result: ToolExecutionResult) -> object:
            seen.append("result")
            return _act(guard)  # a junk return value, or a raise: contained

    return Policy()


class _AllowedLookalike(str):
    """A str subclass equal to everything: never an approval."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


ALLOWING = ("allowed-once", "allowed-always")
"""The only approval answers (exactly these str values) that may let a body run."""


class _Approval:
    def __init__(self, outcome: object) -> None:
        self.outcome = outcome

    def request(self, request: object) -> object:
        return _act(self.outcome)


@FUZZ
@given(
    pre=PRE,
    guard=GUARD,
    post=post_decisions(),
    wrapper=WRAPPERS,
    is_async=st.booleans(),
    approval=st.none()
    | st.sampled_from([outcome.value for outcome in ApprovalOutcome] + ["bogus", 7])
    | st.sampled_from([mock.ANY, _AllowedLookalike("allowed-once")])  # hostile equality
    | ERRORS,
    body_value=argument_values(),
    agent=st.none() | st.just("agent"),
    backend=st.sampled_from(["sync", "asyncio", "trio"]),
)
def test_random_decisions_never_crash_and_denials_always_hold(
    pre: object,
    guard: object,
    post: object,
    wrapper: str,
    is_async: bool,
    approval: object,
    body_value: Any,
    agent: str | None,
    backend: str,
) -> None:
    COUNTS["decisions"] += 1
    ran: list[str] = []
    seen: list[str] = []

    def body(args: Any, ctx: Any) -> Any:
        ran.append("body")
        return body_value

    registry = ToolRegistry(approval=None if approval is None else _Approval(approval))
    view = registry if agent is None else registry.scope(agent)
    view.register(define_tool(name="t", description="d", parameters={}, execute=body))
    view.add_plugin(_decision_plugin(pre, guard, post, wrapper, is_async, seen))
    call = ToolExecutionInput("c", "t", {"x": 1})
    if backend == "sync":
        result = view.execute_sync(call)
    else:
        result = anyio.run(view.execute, call, backend=backend)
    assert_clean(result)
    assert seen == ["result"]  # observed exactly once, whatever happened
    if isinstance(pre, (Deny, _Raise)) or (not is_async and isinstance(guard, (str, _Raise))):
        # a later stage may replace the denial's code (a failing post-execute keeps its
        # own), but nothing may turn it into a success or let the body run
        assert ran == [], "a denial or a failing policy stage let the body run"
        assert result.is_error
    exactly_allowing = type(approval) is str and approval in ALLOWING
    if isinstance(pre, Ask) and not exactly_allowing:
        assert ran == [], f"approval answer {approval!r} let the body run"
    if isinstance(pre, Deny) and post is None:
        assert isinstance(result, ToolExecutionFailure)
        assert result.code == "DENIED"
        assert result.error.message == pre.reason


@pytest.mark.parametrize("stage", ["pre_execute", "guard", "approval"])
def test_unprintable_decisions_are_contained(stage: str) -> None:
    class Policy:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> object:
            if stage == "pre_execute":
                return _Unprintable()
            return Ask("why") if stage == "approval" else None

        @hookimpl
        def dsh_tools_guard(self, execution: ToolExecution) -> object:
            return _Unprintable() if stage == "guard" else None

    ran: list[str] = []
    registry = ToolRegistry(approval=_Approval(_Unprintable()))
    registry.register(
        define_tool(name="t", description="d", parameters={}, execute=lambda a, c: ran.append("x"))
    )
    registry.add_plugin(Policy())
    result = registry.scope("a").execute_sync(ToolExecutionInput("c", "t", {}))
    assert ran == []
    assert isinstance(result, ToolExecutionFailure)
    assert result.code in ("POLICY_ERROR", "DENIED")


# --------------------------------------------------------------------------- cards


@FUZZ
@given(payload=card_payloads())
def test_card_json_structures_or_raises_card_error(payload: tuple[str, Any]) -> None:
    COUNTS["cards"] += 1
    which, data = payload
    structure = structure_call_view if which == "call" else structure_result_view
    card, error = _outcome(lambda: structure(data))
    if error is not None:
        assert isinstance(error, CardError), repr(error)
        assert str(error)
        assert error.code == "INVALID_JSON"
        return
    again = unstructure_view(card)
    json.dumps(again, allow_nan=False)
    assert structure(json.loads(json.dumps(again))) == card


# --------------------------------------------------------------------------- deep nesting


def _echo_registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(define_tool(name="t", description="d", parameters={}, execute=_echo))
    registry.register(
        define_tool(
            name="typed",
            description="d",
            parameters={"items": {"type": "array", "items": {"type": "array"}}},
            execute=_echo,
        )
    )
    return registry


@pytest.mark.parametrize("make", [deep_list, deep_dict], ids=["list", "dict"])
def test_deep_arguments_fail_cleanly_in_bounded_time_and_memory(
    make: Callable[[int], Any],
) -> None:
    COUNTS["deep"] += 1
    deep = make(DEEP)
    registry = _echo_registry()
    for name, arguments in (("t", {"a": deep}), ("typed", {"items": [deep]}), ("t", deep)):
        result, _ = bounded(
            lambda: registry.execute_sync(ToolExecutionInput("c", name, arguments))  # noqa: B023
        )
        assert isinstance(result, ToolExecutionFailure)
        assert result.code == "INVALID_JSON"
        assert "nests deeper than" in result.text or "must be a JSON object" in result.text
        assert_clean(result)


@pytest.mark.anyio
async def test_deep_arguments_fail_cleanly_through_async_execute() -> None:
    COUNTS["deep"] += 1
    result = await _echo_registry().execute(ToolExecutionInput("c", "t", {"a": deep_list(DEEP)}))
    assert isinstance(result, ToolExecutionFailure)
    assert result.code == "INVALID_JSON"


def test_deep_values_never_crash_validators_or_json_helpers() -> None:
    COUNTS["deep"] += 1
    deep = deep_list(DEEP)
    text = "[" * DEEP + "]" * DEEP
    schemas = [
        {},
        {"type": "array"},
        {"type": "array", "items": {"type": "array", "items": {}}},
        {"oneOf": [{"type": "array"}, {"type": "object"}]},
        {"type": "object", "properties": {"a": {}}},
    ]

    def work() -> None:
        for schema in schemas:
            for value in (deep, deep_dict(DEEP), {"a": deep}):
                found = compile_validator(schema)(value)
                assert isinstance(found, list)
                assert found, (schema, "a 100 000-deep value is not lossless JSON")
        with pytest.raises(JsonValueError, match="nests deeper than"):
            snapshot(deep)
        with pytest.raises(JsonValueError, match="nests deeper than"):
            loads(text)
        with pytest.raises(JsonValueError):
            dumps(deep)
        with pytest.raises(JsonValueError):
            thaw(deep)

    bounded(work)


def test_deep_specs_and_schemas_are_refused_cleanly() -> None:
    COUNTS["deep"] += 1
    spec: dict[str, Any] = {"type": "string"}
    raw: dict[str, Any] = {"type": "string"}
    for _ in range(DEEP):
        spec = {"type": "array", "items": spec}
        raw = {"type": "array", "items": raw}
    one_of: dict[str, Any] = {"type": "null"}
    for _ in range(DEEP):
        one_of = {"oneOf": [one_of, {"type": "null"}]}

    def work() -> None:
        with pytest.raises(JsonSchemaError, match="nests deeper than"):
            value_spec_to_json_schema(spec)
        with pytest.raises(JsonSchemaError, match="nests deeper than"):
            schema_spec_to_json_schema({"p": spec})
        for schema in (raw, one_of, {"type": "object", "default": deep_list(DEEP)}):
            with pytest.raises(JsonSchemaError):
                assert_supported_json_schema(schema)
        with pytest.raises(DshToolsError):
            define_tool(name="t", description="d", parameters={"p": spec}, execute=_echo)

    bounded(work)


def test_deep_outputs_decisions_and_cards_fail_cleanly() -> None:
    COUNTS["deep"] += 1
    deep = deep_list(DEEP)

    class DeepAccept:
        @hookimpl
        def dsh_tools_post_execute(
            self, execution: ToolExecution, result: ToolExecutionResult
        ) -> object:
            return Accept(value=deep)

    registry = ToolRegistry()
    registry.register(
        define_tool(name="deep", description="d", parameters={}, execute=lambda a, c: deep)
    )
    registry.register(
        define_tool(
            name="deep_final",
            description="d",
            parameters={},
            execute=lambda a, c: "x",
            finalize_content=lambda execution, result: [{"type": "text", "nested": deep}],
        )
    )
    scoped = registry.scope("accept")
    scoped.register(define_tool(name="ok", description="d", parameters={}, execute=lambda a, c: 1))
    scoped.add_plugin(DeepAccept())

    def work() -> None:
        first = registry.execute_sync(ToolExecutionInput("c", "deep", {}))
        assert isinstance(first, ToolExecutionFailure)
        assert first.code == "TOOL_ERROR" or first.code == "INVALID_TOOL_OUTPUT"
        second = registry.execute_sync(ToolExecutionInput("c", "deep_final", {}))
        assert isinstance(second, ToolExecutionFailure)
        assert second.code == "INVALID_JSON"
        third = scoped.execute_sync(ToolExecutionInput("c", "ok", {}))
        assert isinstance(third, ToolExecutionFailure)
        assert third.code in ("POLICY_ERROR", "INVALID_JSON")
        for result in (first, second, third):
            assert_clean(result)
        with pytest.raises(CardError, match="nests deeper than"):
            structure_call_view({"card": "generic", "title": "t", "rawInput": deep})
        with pytest.raises(CardError):
            structure_result_view({"card": "generic", "content": [{"type": "x", "d": deep}]})

    bounded(work)


# --------------------------------------------------------------------------- large inputs


def _large_registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(
        define_tool(
            name="size",
            description="d",
            parameters={
                "text": {"type": "string"},
                "numbers": {"type": "array", "items": {"type": "integer"}},
                "table": {"type": "object"},
            },
            execute=lambda args, ctx: {
                "text": len(args.get("text", "")),
                "numbers": len(args.get("numbers", ())),
                "table": len(args.get("table", {})),
            },
        )
    )
    return registry


@pytest.mark.parametrize(
    ("field", "make", "size"),
    [
        ("text", lambda: "x" * TEN_MB, TEN_MB),
        ("numbers", lambda: list(range(1_000_000)), 1_000_000),
        ("table", lambda: {f"key-{i:07d}": "v" * 90 for i in range(100_000)}, 100_000),
    ],
    ids=["10MB-string", "1M-integers", "10MB-object"],
)
def test_large_arguments_succeed_in_bounded_time_and_memory(
    field: str, make: Callable[[], Any], size: int
) -> None:
    COUNTS["large"] += 1
    registry = _large_registry()
    arguments = {field: make()}
    result, _ = bounded(lambda: registry.execute_sync(ToolExecutionInput("c", "size", arguments)))
    assert isinstance(result, ToolExecutionSuccess), getattr(result, "text", result)
    assert result.value[field] == size  # type: ignore[index]


def test_large_invalid_arguments_fail_cleanly_in_bounded_time_and_memory() -> None:
    COUNTS["large"] += 1
    registry = _large_registry()
    numbers: list[Any] = list(range(1_000_000))
    numbers[-1] = "not a number"
    calls = [
        {"numbers": numbers},  # one violation at the very end
        {"numbers": ["x"] * 50_000},  # 50 000 violations
        {"text": "x" * TEN_MB, "bad": math.nan},  # non-JSON next to 10 MB
        {"text": 7, "numbers": "x" * TEN_MB},
    ]

    def work() -> list[ToolExecutionResult]:
        return [registry.execute_sync(ToolExecutionInput("c", "size", a)) for a in calls]

    results, _ = bounded(work)
    assert isinstance(results, list)
    codes = [result.code for result in results]
    assert codes == ["INVALID_ARGS", "INVALID_ARGS", "INVALID_JSON", "INVALID_ARGS"]
    for result in results:
        data = assert_clean(result)
        assert len(json.dumps(data)) < 50 * 1024 * 1024


def test_large_json_text_through_loads_is_bounded() -> None:
    COUNTS["large"] += 1
    text = json.dumps({"text": "é" * (TEN_MB // 2), "numbers": list(range(500_000))})
    value, _ = bounded(lambda: loads(text))
    assert isinstance(value, FrozenDict)
    assert len(value["text"]) == TEN_MB // 2  # type: ignore[arg-type]


def test_recursion_limit_is_untouched() -> None:
    """The deep tests above must not pass by raising the interpreter's recursion limit."""
    assert sys.getrecursionlimit() <= 10_000


# --------------------------------------------------------------------------- file names


def _file_names() -> st.SearchStrategy[bytes]:
    """Any bytes the OS allows in one file name, UTF-8 or not."""
    return st.binary(min_size=1, max_size=12).filter(
        lambda name: b"/" not in name and b"\x00" not in name and name not in (b".", b"..")
    )


@FUZZ
@given(names=st.lists(_file_names(), min_size=1, max_size=5, unique=True))
def test_file_tools_answer_on_any_wire_whatever_the_names_in_the_workspace(
    names: list[bytes],
) -> None:
    COUNTS["file names"] += 1
    with tempfile.TemporaryDirectory() as folder:
        root = os.path.join(folder, "ws")
        os.mkdir(root)
        for name in names:
            try:
                with open(os.fsencode(root) + b"/" + name, "wb") as handle:
                    handle.write(name + b"\n")
            except OSError:  # pragma: no cover - a file system that refuses the name
                pytest.skip("this file system refuses names that are not UTF-8")
        log = os.path.join(folder, "audit.jsonl")
        registry = ToolRegistry()
        for tool in workspace_tools(root):
            registry.register(tool)
        registry.add_plugin(AuditLog(log))
        paths = [os.fsdecode(name) for name in names]
        calls = [("list_dir", {})]
        for path in paths:
            calls.append(("read_file", {"path": path}))
            calls.append(("edit_file", {"path": path, "old_string": "\n", "new_string": "!\n"}))
        for index, (tool, arguments) in enumerate(calls):
            result = registry.execute_sync(ToolExecutionInput(f"c{index}", tool, arguments))
            data = assert_clean(result)
            json.dumps(data, ensure_ascii=False).encode("utf-8")  # valid Unicode throughout
        events = [(event.event, event.call_id) for event in read_audit_log(log, strict=True)]
        assert events == [
            (kind, f"c{index}")
            for index in range(len(calls))
            for kind in ("tool/call", "tool/result")
        ]


def test_changing_a_file_of_repeated_lines_is_bounded() -> None:
    # difflib matches lines in quadratic time: 5 000 equal lines around one change took
    # 30 s to diff, so a change's diff must not hand it the whole file
    COUNTS["large"] += 1
    text = "}\n" * 5000 + "target\n" + "}\n" * 5000
    with tempfile.TemporaryDirectory() as root:
        with open(os.path.join(root, "f.txt"), "w") as handle:
            handle.write(text)
        registry = ToolRegistry()
        for tool in workspace_tools(root):
            registry.register(tool)
        calls = [
            ("edit_file", {"path": "f.txt", "old_string": "target", "new_string": "changed"}),
            ("write_file", {"path": "f.txt", "content": text.replace("target", "other")}),
            ("write_file", {"path": "f.txt", "content": text}),
        ]

        def work() -> list[ToolExecutionResult]:
            return [registry.execute_sync(ToolExecutionInput("c", n, a)) for n, a in calls]

        results, _ = bounded(work)
    assert isinstance(results, list)
    for result in results:
        assert isinstance(result, ToolExecutionSuccess), result.text
        assert len(result.value["diffs"]) == 1  # type: ignore[index]


# --------------------------------------------------------------------------- catastrophic patterns

_BACKTRACKING_PIECES = st.sampled_from(
    [
        *("a*", "a+", "(a|a)", "(a|aa)", ".*", "(.*)", "(a*)*", "(a+)+", "x?", "\\w*"),
        *("[ab]*", "(?:a|b|ab)*", ".{0,50}", "(.*.*)*", "a{1,40}", "(\\s*\\S*)*", "\\b"),
    ]
)


@st.composite
def catastrophic_regexes(draw: st.DrawFn) -> str:
    """Nested and stacked quantifiers: exponential or high-polynomial for a backtracker."""
    body = "".join(draw(st.lists(_BACKTRACKING_PIECES, min_size=1, max_size=8)))
    for _ in range(draw(st.integers(0, 3))):
        body = f"({body})" + draw(st.sampled_from(["*", "+", "{2,30}", "?"]))
    return body + draw(st.sampled_from(["z", "$", "b", "!", ""]))


@st.composite
def catastrophic_globs(draw: st.DrawFn) -> str:
    """Many stars between literals (``*a*a*a*b``), braces and classes."""
    piece = st.sampled_from(["*a", "*", "?", "[ab]", "{a,aa,*a}", "*{a,b}", "a"])
    name = "".join(draw(st.lists(piece, min_size=1, max_size=40)))
    return draw(st.sampled_from(["", "**/", "*/"])) + name + draw(st.sampled_from(["b", "*", ""]))


@pytest.fixture(scope="module")
def search_registry(tmp_path_factory: pytest.TempPathFactory) -> ToolRegistry:
    """glob and grep over long lines and long names, what backtracking chokes on."""
    from dsh_tools_plugins.search import glob_tool, grep_tool
    from dsh_tools_plugins.workspace import Workspace

    root = tmp_path_factory.mktemp("catastrophic")
    (root / "long-line.txt").write_text("a" * 5000 + "\n" + "ab " * 2000 + "\n")
    (root / ("a" * 200)).write_text(
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n"
    )
    (root / "a" / "aa" / "aaa").mkdir(parents=True)
    (root / "a" / "aa" / "aaa" / ("ab" * 60)).write_text("x\n")
    workspace = Workspace(root)
    registry = ToolRegistry()
    registry.register(glob_tool(workspace))
    registry.register(grep_tool(workspace))
    return registry


@FUZZ
@given(pattern=catastrophic_regexes(), case_insensitive=st.booleans())
def test_catastrophic_grep_patterns_end_within_a_bound(
    search_registry: ToolRegistry, pattern: str, case_insensitive: bool
) -> None:
    COUNTS["catastrophic grep"] += 1
    arguments = {"pattern": pattern, "case_insensitive": case_insensitive}
    _search_ends_cleanly(search_registry, "grep", arguments)


@FUZZ
@given(pattern=catastrophic_globs())
def test_catastrophic_glob_patterns_end_within_a_bound(
    search_registry: ToolRegistry, pattern: str
) -> None:
    COUNTS["catastrophic glob"] += 1
    _search_ends_cleanly(search_registry, "glob", {"pattern": pattern})
    _search_ends_cleanly(search_registry, "grep", {"pattern": "a", "include": pattern})


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("grep", {"pattern": "(.*.*)*z"}),  # r06: 33 s in Python's re
        ("grep", {"pattern": "(a|aa)*" * 30 + "b"}),
        ("grep", {"pattern": "(" * 1000 + "a" + ")" * 1000}),  # RE2 refuses the nesting
        ("grep", {"pattern": "((a{1,1000}){1,1000}){1,1000}"}),  # and the repetition
        ("grep", {"pattern": "|".join(f"w{index}" for index in range(50_000))}),  # too large
        ("glob", {"pattern": "*a" * 8 + "*b"}),  # r06b: 69 s in Python's re
        ("glob", {"pattern": "**/" * 200 + "*a" * 50 + "*b"}),
        ("grep", {"pattern": "a", "include": "{*a,*aa,*aaa}" * 20 + "b"}),
    ],
)
def test_known_catastrophic_searches_end_within_a_bound(
    search_registry: ToolRegistry, name: str, arguments: dict[str, Any]
) -> None:
    COUNTS["catastrophic known"] += 1
    _search_ends_cleanly(search_registry, name, arguments)


def _search_ends_cleanly(registry: ToolRegistry, name: str, arguments: dict[str, Any]) -> None:
    """Searching is linear in the pattern and in the text, so a search costs about what
    two plain ones do, timed in the same test whatever the machine's load: a literal of
    the pattern's length (reading and compiling it) and a pattern that matches every
    line or name (trying each one). Backtracking, exponential or quadratic, takes
    seconds to hours on these inputs and misses the bound by orders of magnitude.

    The pattern's size is its compiled program's (a counted repetition copies what it
    repeats), so a grep pattern may take as many times longer as its program is larger
    than the literal's: ``((a|a){2,30}){2,30}$`` is 1,800 steps, and RE2 looks at each
    for every ``a`` of a long line."""
    literal = {key: "x" * len(value) if key in _SCAN else value for key, value in arguments.items()}
    scan = {key: _SCAN[key][name] if key in _SCAN else value for key, value in arguments.items()}
    took, result = _fastest(registry, name, arguments)

    baseline = _fastest(registry, name, literal)[0] + _fastest(registry, name, scan)[0]
    bound = LINEAR_FACTOR * baseline * _larger_program(name, arguments, literal)
    assert took < bound, (
        f"{name} {arguments!r:.80} took {took:.3f} s, the plain searches {baseline:.3f} s"
    )
    assert_clean(result)
    if isinstance(result, ToolExecutionFailure):
        assert result.code == "INVALID_ARGS", result.text


def _larger_program(name: str, arguments: dict[str, Any], literal: dict[str, Any]) -> float:
    """How many times larger a grep pattern's compiled program is than its literal's
    (1 for a glob, or a pattern the search refuses)."""
    if name != "grep":
        return 1.0
    case_insensitive = bool(arguments.get("case_insensitive"))
    try:
        size = compile_line_pattern(arguments["pattern"], case_insensitive=case_insensitive)
    except ToolArgsError:
        return 1.0
    plain = compile_line_pattern(literal["pattern"], case_insensitive=case_insensitive)
    return max(1.0, size.program_size / plain.program_size)


_SCAN = {"pattern": {"grep": ".", "glob": "**/*"}, "include": {"grep": "*"}}
"""Per argument and tool: a pattern that matches every line (grep) or name (glob)."""
LINEAR_FACTOR = 20
"""How many times the plain searches a search may take: linear ones measure about 1,
backtracking ones thousands."""


def _fastest(
    registry: ToolRegistry, name: str, arguments: dict[str, Any]
) -> tuple[float, ToolExecutionResult]:
    """The shortest of three runs (a run of a second or more is not repeated): a busy
    machine only ever adds time, in bursts that one of the runs escapes."""
    fastest = math.inf
    for _ in range(3):
        started = time.perf_counter()
        result = registry.execute_sync(ToolExecutionInput("c", name, arguments))
        fastest = min(fastest, time.perf_counter() - started)
        if fastest >= 1.0:
            break
    return fastest, result


# --------------------------------------------------------------------------- path spellings

_SECRET = "sk-live-123"
_DETOURS = ["", "./", "src/../", "nope/../", "docs/../", "secrets/../", "a/b/../../", ".//"]


@pytest.fixture(scope="module")
def secret_workspace(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A workspace holding ``secrets/key``, a ``src`` and a ``docs/keys`` link to secrets."""
    root = os.path.realpath(tmp_path_factory.mktemp("spellings"))
    for folder in ("secrets", "src", "docs"):
        os.mkdir(os.path.join(root, folder))
    with open(os.path.join(root, "secrets", "key"), "w") as handle:
        handle.write(f"{_SECRET}\n")
    os.symlink("../secrets", os.path.join(root, "docs", "keys"))
    return root


@st.composite
def secret_spellings(draw: st.DrawFn, root: str) -> str:
    """One spelling of ``secrets/key``: relative, absolute or through ``/proc/self/root``,
    with detours through ``..``, ``.``, doubled slashes and the link."""
    start = draw(st.sampled_from(["", "./", f"{root}/", f"/proc/self/root{root}/", f"/{root}/"]))
    parts = draw(st.sampled_from([["secrets", "key"], ["docs", "keys", "key"]]))
    text = start
    for part in parts:
        text += draw(st.sampled_from(_DETOURS)) + part + draw(st.sampled_from(["/", "//"]))
    return text.rstrip("/")


@FUZZ
@given(data=st.data())
def test_no_spelling_of_a_denied_file_is_read(secret_workspace: str, data: st.DataObject) -> None:
    COUNTS["path spellings"] += 1
    root = secret_workspace
    prefix = data.draw(
        st.sampled_from(
            ["secrets", "./secrets/", f"{root}/secrets", f"/proc/self/root{root}/secrets"]
        )
    )
    guard = data.draw(st.booleans())
    spelling = data.draw(secret_spellings(root))
    registry = ToolRegistry()
    for tool in workspace_tools(root, sandbox="off"):
        registry.register(tool)
    enforce = 'enforce = "guard"\n' if guard else ""
    registry.add_plugin(
        PermissionRules.from_toml_text(
            f'default = "allow"\n[[rule]]\naction = "deny"\npath_prefix = "{prefix}"\n{enforce}'
        )
    )
    if guard:

        class AllowFirst:
            @hookimpl
            def dsh_tools_pre_execute(self, execution: ToolExecution) -> Allow:
                return Allow()

        registry.add_plugin(AllowFirst())  # runs before the rules: only the guard is left
    calls: list[tuple[str, dict[str, Any]]] = [
        ("read_file", {"path": spelling}),
        ("grep", {"pattern": "sk", "path": spelling}),
        ("grep", {"pattern": "sk", "path": os.path.dirname(spelling) or "."}),
        ("glob", {"pattern": "*", "path": os.path.dirname(spelling) or "."}),
        ("edit_file", {"path": spelling, "old_string": "sk", "new_string": "sk"}),
    ]
    if not spelling.startswith("/"):
        calls.append(("grep", {"pattern": "sk", "include": spelling}))
        calls.append(("glob", {"pattern": spelling}))
    for name, arguments in calls:
        result = registry.execute_sync(ToolExecutionInput("c", name, arguments))
        assert_clean(result)
        assert isinstance(result, ToolExecutionFailure), (name, arguments, result.text)
        assert result.code == "DENIED", (name, arguments, result.text)
        assert _SECRET not in json.dumps(result_to_json(result)), (name, arguments)
