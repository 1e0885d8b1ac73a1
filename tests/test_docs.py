"""Every ```python block in README.md and docs/ runs, as a user would paste it.

Blocks run in a fresh namespace each, in a temporary working directory, so they must be
self-contained. A block that should not run (pseudo-code) belongs in a ```text fence. A
block that reads ``DSH_TOOLS_APPROVALS_URL`` gets the test PostgreSQL server's.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sandbox_owner import give_away

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _examples() -> list[tuple[str, int, str]]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((str(page.relative_to(ROOT)), line, match.group(1)))
    return found


EXAMPLES = _examples()


def _given_away(mkdtemp: Callable[..., str]) -> Callable[..., str]:
    def made(*args: Any, **kwargs: Any) -> str:
        path = mkdtemp(*args, **kwargs)
        give_away(Path(path))
        return path

    return made


def test_the_docs_have_examples() -> None:
    assert any(page == "README.md" for page, _, _ in EXAMPLES)


@pytest.mark.parametrize(
    ("page", "line", "source"), EXAMPLES, ids=[f"{p}:{n}" for p, n, _ in EXAMPLES]
)
def test_example_runs(
    page: str,
    line: int,
    source: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    monkeypatch.chdir(tmp_path)
    if "run_command" in source:
        # A root host runs sandboxed commands as the workspace's owner: the temporary
        # workspace goes to an unprivileged user, as a root host's workspace must.
        monkeypatch.setattr(tempfile, "mkdtemp", _given_away(tempfile.mkdtemp))
    if "DSH_TOOLS_APPROVALS_URL" in source:
        # The PostgreSQL examples read the database's URL from the environment.
        monkeypatch.setenv("DSH_TOOLS_APPROVALS_URL", request.getfixturevalue("postgres_url"))
    code = compile(source, f"{page}:{line}", "exec", dont_inherit=True)
    exec(code, {"__name__": f"docs_example_{line}"})
