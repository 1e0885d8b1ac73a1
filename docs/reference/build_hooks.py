"""MkDocs build hooks (``hooks:`` in mkdocs.yml), run by ``mkdocs build``.

* The error table: docs/reference/errors.md keeps a marker line, ``<!-- error-codes -->``,
  that is replaced by a table of every ``ErrorCode`` made from the enum's member
  docstrings in ``src/dsh_tools/errors.py``, so the page cannot drift from the code.
  ``tests/test_docs_site.py`` checks that the built page names every member.
* Sphinx roles: the package's docstrings use reST roles (``:class:`~dsh_tools.Allow```),
  which Markdown leaves as literal text; the API pages show them as plain code instead.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

MARKER = "<!-- error-codes -->"
PAGE = "reference/errors.md"
ERRORS = Path(__file__).resolve().parents[2] / "src" / "dsh_tools" / "errors.py"


def error_codes(source: Path = ERRORS) -> list[tuple[str, str]]:
    """``(member, docstring)`` for every ``ErrorCode`` member, in declaration order."""
    tree = ast.parse(source.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "ErrorCode":
            break
    else:
        raise LookupError(f"no class ErrorCode in {source}")
    members: list[tuple[str, str]] = []
    body = node.body
    for index, statement in enumerate(body):
        if not (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
        ):
            continue
        following = body[index + 1] if index + 1 < len(body) else None
        doc = ""
        if (
            isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            doc = inspect.cleandoc(following.value.value)
        members.append((statement.targets[0].id, doc))
    return members


def render_table(members: list[tuple[str, str]]) -> str:
    """A Markdown table: one row per code, its meaning on one line."""
    rows = ["| code | meaning |", "|---|---|"]
    for name, doc in members:
        meaning = " ".join(doc.split()).replace("|", "\\|") or "(undocumented)"
        rows.append(f"| `{name}` | {meaning} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Replace the marker on the errors page with the generated table."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lost its {MARKER} line; the error table has nowhere to go")
    return markdown.replace(MARKER, render_table(error_codes()))


# After Markdown, a role reads ``:class:<code>~dsh_tools.Allow</code>``.
_ROLE = re.compile(r":(?:class|func|data|meth|attr|mod|exc|obj):<code>(~?)([^<]+)</code>")
_LITERAL_BLOCK = re.compile(r"::(</p>)")


def _role(match: re.Match[str]) -> str:
    target = match.group(2)
    if match.group(1):
        target = target.rsplit(".", 1)[-1]
    return f"<code>{target}</code>"


def on_page_content(html: str, page: Any, **_: Any) -> str:
    """Render reST roles as code and end "Example::" paragraphs with a single colon."""
    if ":<code>" not in html and "::</p>" not in html:
        return html
    return _LITERAL_BLOCK.sub(r":\1", _ROLE.sub(_role, html))
