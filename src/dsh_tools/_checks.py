"""Static checks of a loaded registry, behind ``dsh-tools check`` and ``dsh-tools schemas``.

Each tool's parameters must be in the enforced schema subset, and its presenters must be
pure on a sample input: called twice, they return equal, well-formed cards and never raise.
A tool whose preflight refuses every call (a sandbox that cannot start commands here) is
reported too, so nobody learns it only after approving a call. Each tool must also be
declarable in the providers' formats: ``define_tool`` accepts any name (MCP servers use
dots, and bridged tools keep their remote names), so the formats whose providers refuse
a name or an empty description are checked here instead.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, cast

import attrs

from ._models import PresentableResult, ToolDefinition, ToolSchema
from ._pipeline.loops import is_awaitable, run_on_own_loop
from ._registry import ToolRegistry
from ._schema.subset import assert_supported_json_schema
from .errors import DshToolsError
from .presentation._cards import unstructure_view

__all__ = ["check_registry", "declaration_problems", "sample_arguments"]

_SAMPLES: dict[str, Any] = {
    "string": "sample",
    "integer": 1,
    "number": 1.5,
    "boolean": True,
    "null": None,
    "array": [],
}


def sample_arguments(schema: Mapping[str, Any]) -> Any:
    """A small value that satisfies ``schema``: required properties only, first choices."""
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if "oneOf" in schema:
        return sample_arguments(schema["oneOf"][0])
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: sample_arguments(properties[name]) for name in schema.get("required", ())}
    if kind in _SAMPLES:
        return _SAMPLES[kind]
    return "sample"


def _twice(label: str, call: Callable[[], object]) -> str | None:
    try:
        first, second = call(), call()
    except Exception as error:
        return f"{label} raised {type(error).__name__}: {error}"
    if first is None:
        return None
    try:
        first_json, second_json = unstructure_view(first), unstructure_view(second)  # type: ignore[arg-type]
    except Exception as error:
        return f"{label} returned {type(first).__qualname__}, not a card ({error})"
    if first_json != second_json:
        return f"{label} is not pure: two calls with the same input returned different cards"
    return None


def _refused(definition: ToolDefinition[Any]) -> list[str]:
    """What the tool's preflight says would refuse every call of it (asked with ``None``)."""
    preflight = definition.preflight
    if preflight is None:
        return []
    try:
        checked = preflight(None)
        if is_awaitable(checked):
            run_on_own_loop(cast("Awaitable[object]", checked))
    except Exception as error:
        return [f'tool "{definition.name}": every call would be refused: {error}']
    return []


def _check_tool(definition: ToolDefinition[Any]) -> list[str]:
    name = definition.name
    problems = _refused(definition)
    try:
        assert_supported_json_schema(definition.parameters)
    except DshToolsError as error:
        problems.append(f'tool "{name}": parameters: {error}')
        return problems
    if definition.present_call is None and definition.present_result is None:
        return problems
    sample = sample_arguments(definition.parameters)
    try:
        arguments = definition.arguments.parse(sample)
    except DshToolsError as error:
        problems.append(f'tool "{name}": could not build sample arguments: {error}')
        return problems
    present_call, present_result = definition.present_call, definition.present_result
    if present_call is not None:
        problem = _twice(f'tool "{name}": present_call', lambda: present_call(arguments))
        problems += [problem] if problem else []
    if present_result is not None:
        sample_result = PresentableResult(content=["sample output"], is_error=False)
        problem = _twice(
            f'tool "{name}": present_result', lambda: present_result(arguments, sample_result)
        )
        problems += [problem] if problem else []
    return problems


@attrs.frozen
class _Requirement:
    """What some providers demand of a declared tool, and the formats that send to them."""

    formats: tuple[str, ...]
    rule: str
    holds: Callable[[ToolSchema], bool]


_OPENAI_ANTHROPIC_NAME: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_GEMINI_NAME: Final = re.compile(r"[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}")

_REQUIREMENTS: Final = (
    _Requirement(
        ("openai", "openai-responses", "anthropic"),
        "the name must match ^[a-zA-Z0-9_-]{1,64}$",
        lambda schema: _OPENAI_ANTHROPIC_NAME.fullmatch(schema.name) is not None,
    ),
    _Requirement(
        ("gemini",),
        "the name must start with a letter or _ and hold at most 64 letters, digits, _ . : or -",
        lambda schema: _GEMINI_NAME.fullmatch(schema.name) is not None,
    ),
    _Requirement(
        ("gemini",),
        "the description must not be empty",
        lambda schema: bool(schema.description.strip()),
    ),
)
"""The providers' documented rules (OpenAI and Anthropic names, Gemini's function
declarations, which also require a description). MCP allows any name."""


def declaration_problems(schemas: Sequence[ToolSchema], format: str) -> list[str]:
    """Why the provider of ``format`` would refuse these declarations, one line per problem."""
    return [
        f'tool "{schema.name}": {requirement.rule} for {format}'
        for schema in schemas
        for requirement in _REQUIREMENTS
        if format in requirement.formats and not requirement.holds(schema)
    ]


def _declarable(schema: ToolSchema) -> list[str]:
    return [
        f'tool "{schema.name}": {requirement.rule} (refused by {", ".join(requirement.formats)})'
        for requirement in _REQUIREMENTS
        if not requirement.holds(schema)
    ]


def check_registry(registry: ToolRegistry) -> list[str]:
    """Every problem found in the registry's visible tools, one line each."""
    problems: list[str] = []
    for name in registry.names():
        definition = registry.get(name)
        if definition is not None:
            problems += _declarable(definition.schema())
            problems += _check_tool(definition)
    return problems
