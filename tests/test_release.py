"""Release readiness: the sdist and wheel build, pass ``twine check``, hold what they must,
and the wheel installs with its declared dependencies into a fresh virtual environment.

Slow (about 15 s: two builds, a new venv, a pip install that may reach the package
index). It runs by default, as in CI; skip it locally with ``DSH_TOOLS_SKIP_RELEASE=1``
or ``pytest -k "not test_release"``.

The build runs without isolation, so the build backend (hatchling, in the ``test``
extra) must be installed; ``python -m build`` (the ``release`` extra) is preferred and
hatchling's own ``hatchling build`` is the fallback.
"""

from __future__ import annotations

import configparser
import importlib.util
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import dsh_tools

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    os.environ.get("DSH_TOOLS_SKIP_RELEASE") == "1",
    reason="DSH_TOOLS_SKIP_RELEASE=1: the release checks were skipped on request",
)


def _run(command: list[str], cwd: Path, timeout: float = 180) -> str:
    # A clean environment for child processes: nothing of this checkout on the path.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    completed = subprocess.run(
        command,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert completed.returncode == 0, (
        f"{' '.join(command)} exited {completed.returncode}\n"
        f"{completed.stdout[-4000:]}\n{completed.stderr[-4000:]}"
    )
    return completed.stdout


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Build the sdist and the wheel once for this module; returns them by kind."""
    if importlib.util.find_spec("hatchling") is None:
        pytest.skip("hatchling (the build backend) is not installed: pip install -e '.[test]'")
    out = tmp_path_factory.mktemp("dist")
    if importlib.util.find_spec("build") is not None:
        # Without --sdist/--wheel, build makes the sdist and then the wheel *from the
        # sdist*, so a file missing from the sdist breaks the wheel too.
        _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), "."], ROOT)
    else:
        _run([sys.executable, "-m", "hatchling", "build", "--directory", str(out)], ROOT)
    wheels = list(out.glob("*.whl"))
    sdists = list(out.glob("*.tar.gz"))
    assert len(wheels) == 1, wheels
    assert len(sdists) == 1, sdists
    return {"wheel": wheels[0], "sdist": sdists[0]}


def test_the_distributions_carry_the_version(dists: dict[str, Path]) -> None:
    version = dsh_tools.__version__
    assert dists["wheel"].name == f"dsh_tools-{version}-py3-none-any.whl"
    assert dists["sdist"].name == f"dsh_tools-{version}.tar.gz"


def test_twine_check_passes(dists: dict[str, Path]) -> None:
    if importlib.util.find_spec("twine") is None:
        pytest.skip("twine is not installed (release extra)")
    output = _run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, dists.values())], ROOT
    )
    assert output.count("PASSED") == 2, output


def test_the_wheel_holds_the_packages_markers_and_entry_points(dists: dict[str, Path]) -> None:
    with zipfile.ZipFile(dists["wheel"]) as wheel:
        names = wheel.namelist()
        info = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entry_points = configparser.ConfigParser()
        entry_points.read_string(wheel.read(info).decode("utf-8"))
        metadata = wheel.read(info.replace("entry_points.txt", "METADATA")).decode("utf-8")

    assert "dsh_tools/py.typed" in names
    assert "dsh_tools_plugins/py.typed" in names
    assert "dsh_tools/pytest_plugin.py" in names
    assert "dsh_tools/bridges/wire.py" in names
    assert not [n for n in names if n.startswith(("tests/", "docs/", "benchmarks/"))]
    assert {n.split("/")[0] for n in names if not n.startswith("dsh_tools-")} == {
        "dsh_tools",
        "dsh_tools_plugins",
    }

    assert entry_points["console_scripts"]["dsh-tools"] == "dsh_tools.cli:console_main"
    assert entry_points["pytest11"]["dsh_tools"] == "dsh_tools.pytest_plugin"
    assert entry_points["dsh_tools.tools"]["workspace"] == "dsh_tools_plugins.tools:workspace_tools"
    assert "Requires-Python: >=3.10" in metadata
    assert "Requires-Dist: pluggy" in metadata


def test_the_sdist_can_rebuild_and_test_the_project(dists: dict[str, Path]) -> None:
    with tarfile.open(dists["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    for required in (
        "pyproject.toml",
        "README.md",
        "CHANGELOG.md",
        "src/dsh_tools/py.typed",
        "src/dsh_tools_plugins/py.typed",
        "tests/test_pipeline.py",
        "docs/hooks.md",
    ):
        assert required in names, f"the sdist lacks {required}"
    assert not [n for n in names if "__pycache__" in n]


def test_the_wheel_installs_with_its_dependencies_into_a_fresh_venv(
    dists: dict[str, Path], tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    python = venv / "bin" / "python"
    # A plain install: pip resolves the declared dependencies from the configured index,
    # so a dependency missing from pyproject.toml fails the import below.
    _run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            str(dists["wheel"]),
        ],
        tmp_path,
        timeout=300,
    )
    probe = "import dsh_tools, dsh_tools._registry, dsh_tools_plugins.tools; "
    probe += "print(dsh_tools.__version__, dsh_tools.__file__)"
    version, location = _run([str(python), "-c", probe], tmp_path).split()
    assert version == dsh_tools.__version__
    assert Path(location).is_relative_to(venv), f"imported from {location}, not the new venv"

    command = _run([str(venv / "bin" / "dsh-tools"), "--version"], tmp_path)
    assert command.strip() == f"dsh-tools {dsh_tools.__version__}"
    tools = _run([str(venv / "bin" / "dsh-tools"), "--workspace", str(tmp_path), "list"], tmp_path)
    assert "read_file" in tools
