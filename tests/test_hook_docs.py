"""docs/hooks.md is generated from hookspecs.py and must not drift from it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_hook_reference_matches_the_hookspecs() -> None:
    spec = importlib.util.spec_from_file_location("gen_hooks", DOCS / "gen_hooks.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    expected = module.render()
    actual = (DOCS / "hooks.md").read_text(encoding="utf-8")
    assert actual == expected, "docs/hooks.md is stale: run `python docs/gen_hooks.py`"
    for hook in module.HOOKS:
        assert f"`{hook}`" in actual
