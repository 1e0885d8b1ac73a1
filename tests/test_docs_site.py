"""The documentation site: complete references, runnable examples, a strict build.

* docs/reference/api.md names every public name (``dsh_tools.__all__``);
* the error reference lists every ``ErrorCode`` member (the table is generated at build
  time by docs/reference/build_hooks.py from the members' docstrings);
* docs/hooks.md documents every hook declared in ``dsh_tools.hookspecs``;
* the pytest example in docs/guides/testing.md passes under pytest;
* ``mkdocs build --strict`` succeeds (skipped when MkDocs is not installed: install the
  ``docs`` extra).
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import dsh_tools
from dsh_tools import hookspecs
from dsh_tools.errors import ErrorCode

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _declared_hooks() -> list[str]:
    return [
        name
        for name, function in inspect.getmembers(hookspecs, inspect.isfunction)
        if name.startswith("dsh_tools_") and hasattr(function, "dsh_tools_spec")
    ]


def test_the_api_reference_names_every_public_name() -> None:
    page = (DOCS / "reference" / "api.md").read_text(encoding="utf-8")
    missing = [
        name
        for name in dsh_tools.__all__
        if not re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)|\.{re.escape(name)}\b", page)
    ]
    assert not missing, f"docs/reference/api.md does not mention: {', '.join(missing)}"


def test_the_api_reference_points_at_real_objects() -> None:
    page = (DOCS / "reference" / "api.md").read_text(encoding="utf-8")
    targets = re.findall(r"^::: ([\w.]+)$", page, re.MULTILINE)
    assert targets
    for target in targets:
        module_name, _, attribute = target.rpartition(".")
        module = importlib.import_module(module_name)
        assert hasattr(module, attribute), f"api.md renders {target}, which does not exist"


def test_the_error_reference_lists_every_error_code() -> None:
    hooks = _load(DOCS / "reference" / "build_hooks.py")
    documented = dict(hooks.error_codes())
    assert list(documented) == [member.name for member in ErrorCode]
    undocumented = [name for name, doc in documented.items() if not doc]
    assert not undocumented, f"ErrorCode members without a docstring: {undocumented}"

    source = (DOCS / "reference" / "errors.md").read_text(encoding="utf-8")
    assert hooks.MARKER in source, "docs/reference/errors.md lost its table marker"
    table = hooks.render_table(hooks.error_codes())
    for member in ErrorCode:
        assert f"| `{member.name}` | " in table


def test_the_hook_reference_documents_every_hook() -> None:
    declared = _declared_hooks()
    assert len(declared) == 5
    page = (DOCS / "hooks.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## \d+\. `(\w+)`$", page, re.MULTILINE)
    assert sorted(headings) == sorted(declared), "docs/hooks.md: run `python docs/gen_hooks.py`"


def test_the_testing_guide_example_passes_under_pytest(tmp_path: Path) -> None:
    page = (DOCS / "guides" / "testing.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(# test_tools\.py\n.*?)^```", page, re.DOTALL | re.MULTILINE)
    assert len(blocks) == 1, "the guide's test module starts with '# test_tools.py'"
    (tmp_path / "test_tools.py").write_text(blocks[0], encoding="utf-8")
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "5 passed" in completed.stdout


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("MkDocs is not installed; install the docs extra: pip install -e '.[docs]'")
    site = tmp_path / "site"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(site),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr

    errors = (site / "reference" / "errors" / "index.html").read_text(encoding="utf-8")
    for member in ErrorCode:
        assert f"<code>{member.name}</code>" in errors, f"{member.name} is not on the page"
    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert ":class:" not in api, "a reST role was left in the rendered API reference"
    assert not list(site.rglob("*.py")), "build scripts were copied into the site"
