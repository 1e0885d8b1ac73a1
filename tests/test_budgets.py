"""The size budgets of the code (issue 27 item 17): every module under ``src/`` at most
500 lines, every function or method at most 60 (from its ``def`` line to its last line,
nested functions counted in the function that holds them)."""

from __future__ import annotations

import ast
from pathlib import Path

MODULE_LINES = 500
FUNCTION_LINES = 60
SOURCES = Path(__file__).resolve().parents[1] / "src"


def over_budget(root: Path) -> list[str]:
    """One line per module or function under ``root`` over its budget, naming its size."""
    offenders: list[str] = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        shown = path.relative_to(root.parent).as_posix()
        lines = len(text.splitlines())
        if lines > MODULE_LINES:
            offenders.append(f"{shown}: module of {lines} lines (budget {MODULE_LINES})")
        for name, node in _functions(ast.parse(text, filename=shown)):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            if size > FUNCTION_LINES:
                offenders.append(
                    f"{shown}:{node.lineno}: {name} has {size} lines (budget {FUNCTION_LINES})"
                )
    return offenders


Function = ast.FunctionDef | ast.AsyncFunctionDef


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, Function]]:
    """Every function and method in ``tree`` with its qualified name (``Class.method``,
    ``outer.inner``)."""
    found: list[tuple[str, Function]] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append((prefix + node.name, node))
            found += _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            found += _functions(node, f"{prefix}{node.name}.")
        else:
            found += _functions(node, prefix)
    return found


def test_the_budget_check_names_each_offender_and_its_size(tmp_path: Path) -> None:
    package = tmp_path / "src" / "package"
    package.mkdir(parents=True)
    statements = "".join(f"        x{n} = {n}\n" for n in range(FUNCTION_LINES - 1))
    fits = f"class Tool:\n    def run(self):\n{statements}"
    (package / "short.py").write_text(fits, encoding="utf-8")
    too_long = f"class Tool:\n    async def run(self):\n{statements}        return None\n"
    (package / "long.py").write_text(too_long + "\n" * MODULE_LINES, encoding="utf-8")

    assert over_budget(tmp_path / "src") == [
        "src/package/long.py: module of 562 lines (budget 500)",
        "src/package/long.py:2: Tool.run has 61 lines (budget 60)",
    ]


def test_every_module_and_function_under_src_keeps_its_budget() -> None:
    offenders = over_budget(SOURCES)

    assert not offenders, "over budget:\n" + "\n".join(offenders)
