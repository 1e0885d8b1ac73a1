"""The wings of the source tree (docs/architecture.md): which part may import which."""

from __future__ import annotations

import ast
from pathlib import Path

SOURCES = Path(__file__).resolve().parents[1] / "src"


def imported_modules(path: Path, root: Path) -> set[str]:
    """Every absolute module name ``path`` imports, at any depth (relative imports resolved)."""
    package = path.relative_to(root).with_suffix("").parts[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            found.add(".".join([*base, node.module] if node.module else base))
    return found


def plugin_importers(root: Path) -> list[str]:
    """The modules of ``dsh_tools`` outside ``dsh_tools/cli/`` that import ``dsh_tools_plugins``."""
    offenders = []
    for path in sorted((root / "dsh_tools").rglob("*.py")):
        if path.relative_to(root / "dsh_tools").parts[0] == "cli":
            continue
        if any(name.split(".")[0] == "dsh_tools_plugins" for name in imported_modules(path, root)):
            offenders.append(path.relative_to(root).as_posix())
    return offenders


def test_only_the_command_imports_the_first_party_plugins() -> None:
    assert plugin_importers(SOURCES) == []


def test_the_check_sees_an_import_of_the_plugins_outside_the_command(tmp_path: Path) -> None:
    (tmp_path / "dsh_tools" / "cli").mkdir(parents=True)
    (tmp_path / "dsh_tools" / "_pipeline").mkdir()
    lazy = "def load():\n    from dsh_tools_plugins.permissions import default_rules\n"
    (tmp_path / "dsh_tools" / "cli" / "_setup.py").write_text(lazy, encoding="utf-8")
    (tmp_path / "dsh_tools" / "_pipeline" / "body.py").write_text(lazy, encoding="utf-8")
    relative = "from ..dsh_tools_plugins import audit\n"
    (tmp_path / "dsh_tools" / "records.py").write_text(relative, encoding="utf-8")

    assert plugin_importers(tmp_path) == ["dsh_tools/_pipeline/body.py", "dsh_tools/records.py"]


# ---------------------------------------------------------------------- import circles

KNOWN_CIRCLES = (
    # Each of these pairs is one job split for speed or size, and names the other only
    # for types or on first use: the cards' JSON form (cattrs, loaded on first use), a
    # call's listener and its execution (`ProgressListener`), the file tools and their
    # output's presenters.
    frozenset({"dsh_tools.presentation._converter", "dsh_tools.presentation._cards"}),
    frozenset({"dsh_tools._models", "dsh_tools.progress"}),
    frozenset({"dsh_tools_plugins._file_output", "dsh_tools_plugins.files"}),
)
"""The import circles still allowed, each a pair exactly as it is: a new one, or one that
grew or shrank, fails the check (then break it, or write it down here). A circle of more
than two modules fails whether it is written here or not."""


def import_graph(root: Path) -> dict[str, set[str]]:
    """Which module of ``root`` imports which, at any depth and under ``TYPE_CHECKING``
    too; ``from package import module`` points at the module (as /work/tools/graph.py)."""
    paths = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        package = (module if path.name == "__init__.py" else module.rpartition(".")[0]).split(".")
        found = graph[module] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names if alias.name in paths)
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                prefix = ".".join([*base, node.module] if node.module else base)
                for alias in node.names:
                    target = f"{prefix}.{alias.name}"
                    if target in paths:
                        found.add(target)
                    elif prefix in paths:
                        found.add(prefix)
        found.discard(module)
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = {stack.pop()}
            while module not in component:
                component.add(stack.pop())
            if len(component) > 1:
                found.append(frozenset(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def circle_problems(root: Path, known: tuple[frozenset[str], ...] = ()) -> list[str]:
    """Every circle through the call path (``dsh_tools._pipeline``) or of more than two
    modules, whether known or not, every other circle that is not exactly one of
    ``known``, and every ``known`` one gone."""
    found = circles(import_graph(root))
    problems = [
        f"import circle of {len(circle)} modules: {', '.join(sorted(circle))}"
        for circle in found
        if any(name.startswith("dsh_tools._pipeline.") for name in circle)
        or len(circle) > 2
        or circle not in known
    ]
    problems += [
        f"known circle no longer found: {', '.join(sorted(circle))}"
        for circle in known
        if circle not in found
    ]
    return sorted(problems)


def test_no_import_circle_but_the_known_ones() -> None:
    assert circle_problems(SOURCES, KNOWN_CIRCLES) == []


def test_the_check_sees_a_planted_circle(tmp_path: Path) -> None:
    files = {
        "dsh_tools/__init__.py": "",
        "dsh_tools/_pipeline/__init__.py": "",
        "dsh_tools/_pipeline/call.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from .._registry import ToolRegistry\n"
        ),
        "dsh_tools/_registry.py": "from ._pipeline.call import Call\n",
        "dsh_tools/a.py": "from . import b\n",
        "dsh_tools/b.py": "def later():\n    from .c import thing\n",
        "dsh_tools/c.py": "import dsh_tools.a\n",
        "dsh_tools/x.py": "from .y import one\n",
        "dsh_tools/y.py": "from .x import two\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    gone = frozenset({"dsh_tools.p", "dsh_tools.q", "dsh_tools.r"})

    assert circle_problems(tmp_path, (gone,)) == [
        "import circle of 2 modules: dsh_tools._pipeline.call, dsh_tools._registry",
        "import circle of 2 modules: dsh_tools.x, dsh_tools.y",
        "import circle of 3 modules: dsh_tools.a, dsh_tools.b, dsh_tools.c",
        "known circle no longer found: dsh_tools.p, dsh_tools.q, dsh_tools.r",
    ]
    call_path = frozenset({"dsh_tools._pipeline.call", "dsh_tools._registry"})
    known = frozenset({"dsh_tools.a", "dsh_tools.b", "dsh_tools.c"})
    pair = frozenset({"dsh_tools.x", "dsh_tools.y"})
    assert circle_problems(tmp_path, (known, pair, call_path)) == [
        "import circle of 2 modules: dsh_tools._pipeline.call, dsh_tools._registry",
        "import circle of 3 modules: dsh_tools.a, dsh_tools.b, dsh_tools.c",
    ]
