"""Fake installed distributions, and the installed ``dsh-tools`` command run against them.

A folder holding ``<name>-<version>.dist-info`` (METADATA and entry_points.txt) plus
modules is, once on ``sys.path`` (or ``PYTHONPATH`` for a subprocess), an installed
distribution for importlib_metadata, at the cost of a few file writes.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

COMMON = """
from dsh_tools._define import define_tool


def tool(name, description=None):
    return define_tool(
        name=name,
        description=f"the {name} tool" if description is None else description,
        parameters={},
        execute=lambda a, c: name,
    )
"""


class Site:
    """A folder of fake installed distributions and their modules.

    Modules live in a package whose name is unique to the test (``site.pkg``), so no
    two tests share an entry in ``sys.modules``.
    """

    def __init__(self, root: Path, pkg: str) -> None:
        self.root = root
        self.pkg = pkg
        self.module("common", COMMON)
        (root / pkg / "__init__.py").write_text("")

    @classmethod
    def fresh(cls, root: Path) -> Site:
        """An empty site in a new folder ``root``, with a package name of its own."""
        root.mkdir(parents=True)
        return cls(root, f"dshfake_{uuid.uuid4().hex[:10]}")

    def module(self, name: str, source: str) -> str:
        """Write ``<pkg>/<name>.py``; return its dotted name."""
        (self.root / self.pkg).mkdir(parents=True, exist_ok=True)
        (self.root / self.pkg / f"{name}.py").write_text(textwrap.dedent(source))
        importlib.invalidate_caches()
        return f"{self.pkg}.{name}"

    def dist(
        self, name: str, entry_points: Mapping[str, Mapping[str, str]], version: str = "1.2.3"
    ) -> str:
        """Install a distribution with these ``{group: {name: value}}`` entry points."""
        info = self.root / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        sections = [
            f"[{group}]\n" + "".join(f"{ep} = {value}\n" for ep, value in eps.items())
            for group, eps in entry_points.items()
        ]
        (info / "entry_points.txt").write_text("\n".join(sections))
        importlib.invalidate_caches()
        return name

    def imported(self, name: str) -> bool:
        return f"{self.pkg}.{name}" in sys.modules


def on_sys_path(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    """A fresh :class:`Site` in ``root``, first on ``sys.path`` until the test ends
    (the body of a ``site`` fixture)."""
    site = Site.fresh(root)
    monkeypatch.syspath_prepend(str(root))
    yield site
    for module in [m for m in sys.modules if m == site.pkg or m.startswith(f"{site.pkg}.")]:
        del sys.modules[module]


def installed_command() -> str:
    """The ``dsh-tools`` console script installed next to this interpreter."""
    found = shutil.which("dsh-tools", path=os.path.dirname(sys.executable))
    assert found is not None, "dsh-tools is not installed in the test environment"
    return found


def run_dsh(
    *argv: str,
    sites: tuple[Site, ...] = (),
    env: Mapping[str, str] | None = None,
    stdin: str | bytes = "",
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run the installed command as a user would, seeing ``sites`` as installed.

    The user's own plugin settings are removed from the environment; ``env`` adds to it.
    Output is decoded as UTF-8 (``errors="strict"``, so text that is not valid UTF-8 fails
    the test).
    """
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DSH_TOOLS_RULES", "DSH_TOOLS_BLOCK_PLUGINS", "DSH_TOOLS_WORKSPACE"}
    }
    paths = [str(site.root) for site in sites]
    if paths:
        environment["PYTHONPATH"] = os.pathsep.join(paths)
    environment.update(env or {})
    done = subprocess.run(
        [installed_command(), *argv],
        input=stdin.encode() if isinstance(stdin, str) else stdin,
        capture_output=True,
        env=environment,
        timeout=timeout,
        check=False,
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode("utf-8"), done.stderr.decode("utf-8")
    )
