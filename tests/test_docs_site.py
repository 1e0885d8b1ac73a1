"""The documentation site: complete references, runnable examples, a strict build.

* docs/reference/api.md names every public name (``dsh_tools.__all__``);
* the error reference lists every ``ErrorCode`` member (the table is generated at build
  time by docs/reference/build_hooks.py from the members' docstrings);
* docs/hooks.md documents every hook declared in ``dsh_tools.hookspecs``;
* the pytest example in docs/guides/testing.md passes under pytest;
* ``mkdocs build --strict`` succeeds (skipped when MkDocs is not installed: install the
  ``docs`` extra), and the built pages show what readers need: every public member of the
  registry, a constructor for every attrs record, a pipeline diagram that needs no script
  from the network;
* until the package is published, the docs install it from a clone.
"""

from __future__ import annotations

import html as htmllib
import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import attrs
import pytest

import dsh_tools
from dsh_tools import hookspecs
from dsh_tools._content import ImageContent
from dsh_tools._registry import ToolRegistry, ToolScope
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
    assert len(declared) == 7  # the five stages and the two progress hooks
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
    assert "6 passed" in completed.stdout


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once for this module with ``mkdocs build --strict``."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("MkDocs is not installed; install the docs extra: pip install -e '.[docs]'")
    site = tmp_path_factory.mktemp("site")
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
    return site


def _page_text(site: Path, page: str) -> str:
    """A built page's text with the markup removed and all whitespace collapsed."""
    html = (site / page / "index.html").read_text(encoding="utf-8")
    return " ".join(htmllib.unescape(re.sub(r"<[^>]+>", " ", html)).split())


def test_the_site_builds_strictly(site: Path) -> None:
    errors = (site / "reference" / "errors" / "index.html").read_text(encoding="utf-8")
    for member in ErrorCode:
        assert f"<code>{member.name}</code>" in errors, f"{member.name} is not on the page"
    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert ":class:" not in api, "a reST role was left in the rendered API reference"
    assert not list(site.rglob("*.py")), "build scripts were copied into the site"


@pytest.mark.parametrize("view", [ToolRegistry, ToolScope])
def test_the_api_reference_shows_every_public_member_of_the_registry(
    site: Path, view: type
) -> None:
    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    public = sorted(name for name in dir(view) if not name.startswith("_"))
    missing = [name for name in public if f'id="dsh_tools.{view.__name__}.{name}"' not in api]
    assert "execute_sync" in public
    assert not missing, f"{view.__name__} members missing from the API page: {missing}"


def test_the_api_reference_shows_how_to_build_each_attrs_record(site: Path) -> None:
    text = "".join(_page_text(site, "reference/api").split())
    page = (DOCS / "reference" / "api.md").read_text(encoding="utf-8")
    records = [
        getattr(importlib.import_module(module), name)
        for module, name in (
            target.rsplit(".", 1) for target in re.findall(r"^::: ([\w.]+)$", page, re.M)
        )
    ]
    records = [record for record in records if attrs.has(record)]
    assert ImageContent in records
    for record in records:
        fields = [field.alias for field in attrs.fields(record) if field.init]
        name = record.__name__
        # A first field may be keyword-only (Allow's detail): "Allow(*, detail: ...)".
        expected = [f"{name}({fields[0]}:", f"{name}(*,{fields[0]}:"] if fields else [f"{name}()"]
        assert any(signature in text for signature in expected), (
            f"the API page shows no constructor for {name}"
        )
    assert "ImageContent(data:str,mime_type:str)" in text


def test_the_pipeline_diagram_is_drawn_without_scripts(site: Path) -> None:
    """Material draws Mermaid blocks in the browser with a script from a CDN, so offline
    readers saw raw ``flowchart TD`` text; the diagram is now SVG in the page itself."""
    html = (site / "pipeline" / "index.html").read_text(encoding="utf-8")
    figure = re.search(r'<svg class="dsh-diagram".*?</svg>', html, re.DOTALL)
    assert figure is not None, "the pipeline page has no diagram"
    labels = [
        htmllib.unescape(label)
        for label in re.findall(r"<text[^>]*>([^<]*)</text>", figure.group())
    ]
    for stage in (
        "1. pre-execute",
        "2. guards",
        "3. execute",
        "4. post-execute",
        "5. result observers",
    ):
        assert stage in labels
    assert "flowchart" not in _page_text(site, "pipeline")
    scripted = [
        str(page.relative_to(site))
        for page in site.rglob("*.html")
        if 'class="mermaid"' in page.read_text(encoding="utf-8")
    ]
    assert not scripted, f"pages that need the Mermaid script from the network: {scripted}"


_PUBLISHED_INSTALL = re.compile(r"pip install\s+(?:-\S+\s+)*['\"]?dsh-tools\b")


def test_the_docs_install_from_a_clone_until_the_package_is_published() -> None:
    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    found = [
        f"{page.relative_to(ROOT)}: {match.group()}"
        for page in pages
        for match in _PUBLISHED_INSTALL.finditer(page.read_text(encoding="utf-8"))
    ]
    assert not found, f"install commands for a package that is not on PyPI: {found}"
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    assert "python -m pip install ." in index
    assert "python -m pip install '.[mcp]'" in index


def test_api_signatures_are_formatted_one_parameter_a_line(site: Path) -> None:
    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    blocks = re.findall(r'class="doc-signature[^"]*".*?<code>(.*?)</code>', api, re.S)
    signatures = [htmllib.unescape(re.sub(r"<[^>]+>", "", block)) for block in blocks]
    assert len(signatures) > 20
    too_long = [line for text in signatures for line in text.splitlines() if len(line) > 100]
    assert not too_long, too_long[:3]
    (registry,) = [text for text in signatures if text.startswith("ToolRegistry(")]
    assert "\n    approval: ApprovalChannel | None = None,\n" in registry


def test_the_wire_examples_sdks_come_with_an_extra() -> None:
    tomllib = pytest.importorskip("tomllib")

    project = tomllib.loads((DOCS.parent / "pyproject.toml").read_text(encoding="utf-8"))
    extras = project["project"]["optional-dependencies"]
    imported = set(
        re.findall(
            r"^(?:from|import) (openai|anthropic|google\.genai)\b",
            (DOCS / "wire.md").read_text(encoding="utf-8"),
            re.M,
        )
    )
    assert "google.genai" in imported
    sdk = {"openai": "openai", "anthropic": "anthropic", "google.genai": "google-genai"}
    provided = {requirement.split(">")[0] for requirement in extras["providers"]}
    assert {sdk[module] for module in imported} <= provided
    assert "providers" in (DOCS / "wire.md").read_text(encoding="utf-8")
    assert any(requirement.startswith("ruff") for requirement in extras["docs"])
