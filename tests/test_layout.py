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
