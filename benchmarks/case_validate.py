"""Case 4: argument validation of a valid value, dsh-tools against the JSON Schema peers.

The same schema and the same (valid) value for every validator: dsh-tools'
``compile_validator`` (what ``ArgumentsModel.violations`` runs), ``fastjsonschema.compile``
and ``jsonschema``'s ``Draft202012Validator.is_valid`` (its fastest yes/no path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from _harness import Row, Settings, Skip, compare_sync, ratio_row, us

from dsh_tools._schema.subset import compile_validator

SMALL: dict[str, Any] = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}
SMALL_VALUE = {"a": 1, "b": 2}


def _leaf(index: int) -> tuple[dict[str, Any], Any]:
    """A property schema and a valid value for it, cycling through the subset's kinds."""
    kind = index % 6
    if kind == 0:
        return {"type": "string", "description": "a name"}, f"value {index}"
    if kind == 1:
        return {"type": "integer"}, index
    if kind == 2:
        return {"type": "number"}, index + 0.5
    if kind == 3:
        return {"type": "boolean"}, index % 2 == 0
    if kind == 4:
        return {"type": "string", "enum": ["low", "mid", "high"]}, "mid"
    return {"type": "array", "items": {"type": "string"}}, ["x", "y", "z"]


def nested_schema() -> tuple[dict[str, Any], dict[str, Any]]:
    """50 properties: 5 nested objects of 9 leaves each (45 + 5), and a valid value."""
    properties: dict[str, Any] = {}
    value: dict[str, Any] = {}
    counter = 0
    for group in range(5):
        inner: dict[str, Any] = {}
        inner_value: dict[str, Any] = {}
        for _ in range(9):
            schema, sample = _leaf(counter)
            inner[f"field{counter}"] = schema
            inner_value[f"field{counter}"] = sample
            counter += 1
        properties[f"group{group}"] = {
            "type": "object",
            "properties": inner,
            "required": list(inner),
            "additionalProperties": False,
        }
        value[f"group{group}"] = inner_value
    schema = {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
    return schema, value


def _fastjsonschema(schema: dict[str, Any]) -> Callable[[Any], object]:
    try:
        import fastjsonschema
    except ImportError:
        raise Skip("fastjsonschema is not installed (pip install -e '.[bench]')") from None
    return fastjsonschema.compile(schema)  # type: ignore[no-any-return]


def _jsonschema(schema: dict[str, Any]) -> Callable[[Any], object]:
    try:
        import jsonschema
    except ImportError:
        raise Skip("jsonschema is not installed (pip install -e '.[bench]')") from None
    return jsonschema.Draft202012Validator(schema).is_valid  # type: ignore[no-any-return]


def _one(settings: Settings, label: str, schema: dict[str, Any], value: Any) -> list[Row]:
    dsh = compile_validator(schema, root="")
    if dsh(value):
        raise AssertionError(f"benchmark value is invalid: {dsh(value)}")
    candidates: dict[str, Callable[[], object]] = {
        f"dsh-tools compile_validator ({label})": _bind(dsh, value)
    }
    skipped: dict[str, str] = {}
    for name, build in (("fastjsonschema", _fastjsonschema), ("jsonschema", _jsonschema)):
        try:
            candidates[f"{name} ({label})"] = _bind(build(schema), value)
        except Skip as reason:
            skipped[name] = str(reason)
    number = max(100, int((20000 if label == "small" else 3000) * settings.scale))
    timings = compare_sync(candidates, number, settings.repeat)
    dsh_name = f"dsh-tools compile_validator ({label})"
    rows = []
    for name in candidates:
        if name != dsh_name:
            rows.append(Row("4", name, *us(timings[name])))
    for name, reason in skipped.items():
        rows.append(Row("4", f"{name} ({label})", unit="", note=f"skipped: {reason}"))
    fast = f"fastjsonschema ({label})"
    if fast in timings:
        rows.append(ratio_row("4", dsh_name, timings[dsh_name], fast, timings[fast], limit=1.0))
    slow = f"jsonschema ({label})"
    if slow in timings:
        rows.append(ratio_row("4", dsh_name, timings[dsh_name], slow, timings[slow]))
    return rows


def _bind(validate: Callable[[Any], object], value: Any) -> Callable[[], object]:
    def call() -> object:
        return validate(value)

    return call


def run(settings: Settings) -> list[Row]:
    schema, value = nested_schema()
    return _one(settings, "small", SMALL, SMALL_VALUE) + _one(settings, "50 props", schema, value)
