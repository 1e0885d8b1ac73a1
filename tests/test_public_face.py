"""The public face (docs/architecture.md): which modules of ``dsh_tools`` are public, and
that the docs, the README and the examples import only from them."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PUBLIC_MODULES = frozenset(
    {
        "dsh_tools",
        "dsh_tools.__main__",
        "dsh_tools.approvals",
        "dsh_tools.bridges",
        "dsh_tools.bridges.acp",
        "dsh_tools.bridges.mcp",
        "dsh_tools.bridges.wire",
        # The `dsh-tools` command's entry point (`dsh_tools.cli:console_main`).
        "dsh_tools.cli",
        "dsh_tools.errors",
        "dsh_tools.hookspecs",
        "dsh_tools.presentation",
        "dsh_tools.progress",
        "dsh_tools.pytest_plugin",
        "dsh_tools.records",
        "dsh_tools.testing",
    }
)
"""Every public module, and only those: a new one is a decision, written down here and in
docs/architecture.md's "The public face"."""


def is_private(dotted: str) -> bool:
    """Whether a part of ``dotted`` starts with an underscore (a dunder name does not count)."""
    return any(
        part.startswith("_") and not (part.startswith("__") and part.endswith("__"))
        for part in dotted.split(".")
    )


def module_names(package: Path) -> list[str]:
    """The importable names of every module under the package directory ``package``."""
    names = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def public_modules(package: Path) -> set[str]:
    """The modules under ``package`` that no underscore hides."""
    return {name for name in module_names(package) if not is_private(name)}


_FROM = re.compile(r"\bfrom\s+(dsh_tools\w*(?:\.\w+)*)\s+import\s+(\([^)]*\)|[^\n`]*)")
_IMPORT = re.compile(r"(?<![\w.])import\s+(dsh_tools\w*(?:\.\w+)*)")
_RENDER = re.compile(r"^::: (dsh_tools\w*(?:\.\w+)*)", re.MULTILINE)


def private_imports(root: Path, files: Iterable[Path]) -> list[str]:
    """``file:line: what`` for each import (or API-reference entry, ``::: name``) in
    ``files`` that reaches a private module or name of ``dsh_tools`` or its plugins."""
    found: list[tuple[str, int, str]] = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        reached = [(match.start(), match.group(1)) for match in _IMPORT.finditer(text)]
        reached += [(match.start(), match.group(1)) for match in _RENDER.finditer(text)]
        for match in _FROM.finditer(text):
            names = re.findall(r"\w+", match.group(2).split("#")[0])
            aliased = {names[i + 1] for i, name in enumerate(names[:-1]) if name == "as"}
            reached += [
                (match.start(), f"{match.group(1)}.{name}")
                for name in names
                if name != "as" and name not in aliased
            ]
        where = path.relative_to(root).as_posix()
        found += [
            (where, text.count("\n", 0, offset) + 1, dotted)
            for offset, dotted in reached
            if is_private(dotted)
        ]
    return [f"{where}:{line}: {dotted}" for where, line, dotted in sorted(found)]


def _documents(root: Path) -> list[Path]:
    return [
        root / "README.md",
        *sorted((root / "docs").rglob("*.md")),
        *sorted((root / "examples").rglob("*.py")),
    ]


def test_the_public_modules_are_the_listed_ones() -> None:
    assert public_modules(ROOT / "src" / "dsh_tools") == PUBLIC_MODULES


def test_the_check_sees_a_new_public_module(tmp_path: Path) -> None:
    package = tmp_path / "dsh_tools"
    for name in ("__init__", "__main__", "_registry", "errors", "_pipeline/plan", "cli/_run"):
        (package / f"{name}.py").parent.mkdir(parents=True, exist_ok=True)
        (package / f"{name}.py").write_text("", encoding="utf-8")
    (package / "cli" / "__init__.py").write_text("", encoding="utf-8")
    (package / "helpers.py").write_text("", encoding="utf-8")
    (package / "_pipeline" / "view").mkdir()
    (package / "_pipeline" / "view" / "__init__.py").write_text("", encoding="utf-8")

    assert public_modules(package) == {
        "dsh_tools",
        "dsh_tools.__main__",
        "dsh_tools.cli",
        "dsh_tools.errors",
        "dsh_tools.helpers",
    }


def test_no_doc_readme_or_example_imports_a_private_module() -> None:
    documents = _documents(ROOT)
    assert ROOT / "examples" / "quickstart.py" in documents
    assert private_imports(ROOT, documents) == []


def test_the_check_sees_each_way_a_doc_imports_a_private_module(tmp_path: Path) -> None:
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text(
        "```python\n"
        "from dsh_tools import ToolRegistry, define_tool\n"
        "from dsh_tools.presentation import (\n    DiffCallView,\n    _freeze,\n)\n"
        "from dsh_tools._json import thaw\n"
        "import dsh_tools._registry\n"
        "from dsh_tools import _models as models\n"
        "from dsh_tools_plugins._rules import policy\n"
        "from dsh_tools.approvals import TicketStore as _Store\n"
        "```\n\n"
        "Run `python -c 'from dsh_tools.cli._run import run'` once.\n\n"
        "::: dsh_tools.ToolRegistry\n\n"
        "::: dsh_tools._cancel.sleep\n",
        encoding="utf-8",
    )

    assert private_imports(tmp_path, [page]) == [
        "docs/page.md:3: dsh_tools.presentation._freeze",
        "docs/page.md:7: dsh_tools._json.thaw",
        "docs/page.md:8: dsh_tools._registry",
        "docs/page.md:9: dsh_tools._models",
        "docs/page.md:10: dsh_tools_plugins._rules.policy",
        "docs/page.md:14: dsh_tools.cli._run.run",
        "docs/page.md:18: dsh_tools._cancel.sleep",
    ]
