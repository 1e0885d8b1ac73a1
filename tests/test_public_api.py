"""The public API: every exported name resolves, is documented, and importing is cheap."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import dsh_tools


def test_all_is_sorted_and_every_name_resolves() -> None:
    assert dsh_tools.__all__ == sorted(dsh_tools.__all__)
    for name in dsh_tools.__all__:
        assert getattr(dsh_tools, name) is not None, name
    assert set(dsh_tools.__all__) <= set(dir(dsh_tools))


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        dsh_tools.nope  # noqa: B018


@pytest.mark.parametrize("name", [n for n in dsh_tools.__all__ if not n.isupper()])
def test_every_public_class_and_function_has_a_docstring(name: str) -> None:
    value = getattr(dsh_tools, name)
    if inspect.isclass(value) or inspect.isfunction(value):
        assert inspect.getdoc(value), f"dsh_tools.{name} has no docstring"


def test_import_loads_no_plugin_and_no_heavy_dependency() -> None:
    code = (
        "import sys, dsh_tools\n"
        "heavy = {'mcp', 'acp', 'rich', 'importlib_metadata', 'anyio', 'cattrs', 'pluggy'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
