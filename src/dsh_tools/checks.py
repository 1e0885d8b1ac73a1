"""Static checks of a loaded registry, behind ``dsh-tools check``.

Each tool's parameters must be in the enforced schema subset, and its presenters must be
pure on a sample input: called twice, they return equal, well-formed cards and never raise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .errors import DshToolsError
from .jsonschema import assert_supported_json_schema
from .models import PresentableResult, ToolDefinition
from .presentation import unstructure_view
from .registry import ToolRegistry

__all__ = ["check_registry", "sample_arguments"]

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


def _check_tool(definition: ToolDefinition[Any]) -> list[str]:
    name = definition.name
    problems = []
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


def check_registry(registry: ToolRegistry) -> list[str]:
    """Every problem found in the registry's visible tools, one line each."""
    problems: list[str] = []
    for name in registry.names():
        definition = registry.get(name)
        if definition is not None:
            problems += _check_tool(definition)
    return problems
