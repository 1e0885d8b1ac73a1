"""Entry point loading: every failure named by distribution, blocking without importing.

Most tests write real distributions (a ``.dist-info`` folder with METADATA and
entry_points.txt, plus modules) into a temporary folder put on ``sys.path``: for
importlib_metadata that is an installed distribution, and it costs milliseconds. Each
test restricts loading to its own distributions with ``only=["dist:..."]`` so whatever
else is installed cannot interfere. The last tests pip-install the two fixture
distributions under ``tests/fixtures/plugin_dists`` into a throwaway virtualenv and run a
host process against them.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import sysconfig
import venv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import importlib_metadata
import pytest

import dsh_tools
from dsh_tools._models import ToolExecutionInput
from dsh_tools._plugins.loading import (
    BLOCK_ENV_VAR,
    GROUPS,
    GUARDS_GROUP,
    PLUGINS_GROUP,
    TOOLS_GROUP,
    LoadReport,
    PluginFailure,
    PluginRecord,
    load_plugins,
)
from dsh_tools._registry import ToolRegistry
from dsh_tools.errors import PluginError
from fake_dists import Site, on_sys_path

FIXTURES = Path(__file__).parent / "fixtures" / "plugin_dists"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    """A fresh fake site-packages, removed from ``sys.path`` and ``sys.modules`` after."""
    monkeypatch.delenv(BLOCK_ENV_VAR, raising=False)
    yield from on_sys_path(tmp_path / "site", monkeypatch)


def only_dist(*names: str) -> list[str]:
    return [f"dist:{name}" for name in names]


def run(registry: ToolRegistry, name: str, **arguments: Any) -> Any:
    return registry.execute_sync(ToolExecutionInput(f"call-{name}", name, arguments))


def assert_names_origin(
    text: str, dist: str, version: str, group: str, ep: str, value: str
) -> None:
    """The text names the distribution, its version and the entry point as declared."""
    assert dist in text
    assert version in text
    assert f"[{group}] {ep} = {value}" in text


# --------------------------------------------------------------------------- contract


def test_group_names_are_stable_constants_in_load_order() -> None:
    assert (TOOLS_GROUP, GUARDS_GROUP, PLUGINS_GROUP) == (
        "dsh_tools.tools",
        "dsh_tools.guards",
        "dsh_tools.plugins",
    )
    assert list(GROUPS.items()) == [
        ("tools", TOOLS_GROUP),
        ("guards", GUARDS_GROUP),
        ("plugins", PLUGINS_GROUP),
    ]
    assert BLOCK_ENV_VAR == "DSH_TOOLS_BLOCK_PLUGINS"


def test_importing_dsh_tools_discovers_and_imports_no_plugin(site: Site, tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    module = site.module("eager", f"open({str(marker)!r}, 'w').close()\nTOOLS = []\n")
    site.dist("eager-dist", {TOOLS_GROUP: {"eager": f"{module}:TOOLS"}})
    code = "import dsh_tools, dsh_tools._plugins.loading, dsh_tools._registry"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site.root), *sys.path])}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    assert not marker.exists()


def test_discovery_runs_once_per_call(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    module = site.module("tools", "from .common import tool\nA = tool('a')\n")
    site.dist("once-dist", {TOOLS_GROUP: {"a": f"{module}:A"}})
    calls = []
    real = importlib_metadata.entry_points

    def counting(**params: Any) -> importlib_metadata.EntryPoints:
        calls.append(params)
        return real(**params)

    monkeypatch.setattr(importlib_metadata, "entry_points", counting)
    report = load_plugins(ToolRegistry(), only=only_dist("once-dist"))
    assert calls == [{}]
    assert [r.name for r in report.loaded] == ["a"]


# --------------------------------------------------------------------------- loading


def test_loads_every_kind_of_target_and_runs_it(site: Site) -> None:
    tools = site.module(
        "tools",
        """
        from .common import tool

        ECHO = tool("echo")
        LISTED = [tool("one"), tool("two")]

        def make_tools():
            return (tool("three"),)

        def make_one():
            return tool("four")
        """,
    )
    guards = site.module(
        "guards",
        """
        def no_rm(execution):
            return "rm is forbidden" if execution.name == "rm" else None
        """,
    )
    plugins = site.module(
        "plugins",
        """
        from dsh_tools._content import content_text
        from dsh_tools.hookspecs import hookimpl
        from dsh_tools._models import Accept, Deny

        class Suffix:
            def __init__(self):
                self.seen = []

            @hookimpl
            def dsh_tools_post_execute(self, execution, result):
                self.seen.append(execution.name)
                return Accept(content=content_text(result.content) + "!")

        @hookimpl
        def dsh_tools_pre_execute(execution):
            return Deny("no three") if execution.name == "three" else None
        """,
    )
    site.dist(
        "acme-tools",
        {
            TOOLS_GROUP: {
                "echo": f"{tools}:ECHO",
                "listed": f"{tools}:LISTED",
                "factory": f"{tools}:make_tools",
                "single": f"{tools}:make_one",
            },
            GUARDS_GROUP: {"no-rm": f"{guards}:no_rm"},
            PLUGINS_GROUP: {"suffix": f"{plugins}:Suffix", "deny-three": plugins},
        },
        version="4.5.6",
    )
    rm_module = site.module("rm", "from .common import tool\nRM = tool('rm')\n")
    site.dist("rm-tool", {TOOLS_GROUP: {"rm": f"{rm_module}:RM"}}, version="0.1")
    registry = ToolRegistry()

    report = load_plugins(registry, only=only_dist("acme-tools", "rm-tool"))

    assert report.ok
    assert report.failed == ()
    assert report.blocked == ()
    by_name = {record.name: record for record in report.loaded}
    assert by_name["echo"] == PluginRecord(
        "echo", "tools", "acme-tools", "4.5.6", f"{tools}:ECHO", ("echo",), ()
    )
    assert by_name["listed"].tools == ("one", "two")
    assert by_name["factory"].tools == ("three",)
    assert by_name["single"].tools == ("four",)
    assert by_name["no-rm"] == PluginRecord(
        "no-rm", "guards", "acme-tools", "4.5.6", f"{guards}:no_rm", (), ("dsh_tools_guard",)
    )
    assert by_name["suffix"].hooks == ("dsh_tools_post_execute",)
    assert by_name["suffix"].group == PLUGINS_GROUP
    assert by_name["deny-three"].hooks == ("dsh_tools_pre_execute",)
    assert by_name["deny-three"].entry_point == plugins
    assert by_name["rm"].distribution == "rm-tool"
    assert [record.kind for record in report.loaded] == ["tools"] * 5 + ["guards"] + ["plugins"] * 2

    echo = run(registry, "echo")
    assert not echo.is_error
    assert echo.content[0]["text"] == "echo!"
    assert run(registry, "rm").error.message == "rm is forbidden"
    assert run(registry, "three").error.message == "no three"
    suffix = registry.plugin_manager.get_plugin("suffix")
    assert suffix.seen == ["echo", "rm", "three"]  # one instance, bound method


@pytest.mark.parametrize(
    ("group", "source", "attr", "cause"),
    [
        pytest.param(
            TOOLS_GROUP,
            "import dsh_fake_dependency_that_is_not_installed\n",
            "TOOL",
            "import failed: ModuleNotFoundError: No module named "
            "'dsh_fake_dependency_that_is_not_installed'",
            id="import-error",
        ),
        pytest.param(
            GUARDS_GROUP,
            "raise RuntimeError('config file missing')\n",
            "guard",
            "import failed: RuntimeError: config file missing",
            id="module-raises-on-import",
        ),
        pytest.param(
            PLUGINS_GROUP,
            "X = 1\n",
            "Missing",
            "import failed: AttributeError:",
            id="missing-attribute",
        ),
        pytest.param(
            TOOLS_GROUP,
            "TOOL = 42\n",
            "TOOL",
            "expected a ToolDefinition, an iterable of them, or a zero-argument callable "
            "returning them; got int",
            id="tools-wrong-type",
        ),
        pytest.param(
            TOOLS_GROUP,
            "TOOL = {'name': 'echo'}\n",
            "TOOL",
            "expected a ToolDefinition, an iterable of them, or a zero-argument callable "
            "returning them; got dict",
            id="tools-mapping-is-not-a-list-of-tools",
        ),
        pytest.param(
            TOOLS_GROUP,
            "from .common import tool\nTOOL = [tool('x'), 'y']\n",
            "TOOL",
            "item 1 is a str, not a ToolDefinition",
            id="tools-list-with-a-non-tool",
        ),
        pytest.param(
            TOOLS_GROUP,
            "def TOOL():\n    raise ValueError('no API key')\n",
            "TOOL",
            "calling TOOL() raised ValueError: no API key",
            id="tools-callable-raises",
        ),
        pytest.param(
            TOOLS_GROUP,
            "def TOOL():\n    yield 1 / 0\n",
            "TOOL",
            "iterating the tools raised ZeroDivisionError: division by zero",
            id="tools-generator-raises",
        ),
        pytest.param(
            TOOLS_GROUP,
            "from .common import tool\nTOOL = tool('taken')\n",
            "TOOL",
            'registering tool "taken" failed: RegistrationError: tool "taken" is already '
            "registered",
            id="duplicate-tool-name",
        ),
        pytest.param(
            GUARDS_GROUP,
            "TOOL = 'deny everything'\n",
            "TOOL",
            "expected a guard function fn(execution) -> str | None, got str",
            id="guard-wrong-type",
        ),
        pytest.param(
            GUARDS_GROUP,
            "class TOOL:\n    pass\n",
            "TOOL",
            "expected a guard function fn(execution) -> str | None, got type",
            id="guard-is-a-class",
        ),
        pytest.param(
            GUARDS_GROUP,
            "async def TOOL(execution):\n    return None\n",
            "TOOL",
            "registering the guard failed: RegistrationError:",
            id="guard-async",
        ),
        pytest.param(
            PLUGINS_GROUP,
            """
            from dsh_tools.hookspecs import hookimpl

            @hookimpl
            def dsh_tools_pre_exec(execution):
                return None
            """,
            "",
            "registering the plugin failed: RegistrationError:",
            id="hookimpl-for-unknown-hook",
        ),
        pytest.param(
            PLUGINS_GROUP,
            """
            from dsh_tools.hookspecs import hookimpl

            class TOOL:
                @hookimpl
                def dsh_tools_guard(self, executoin):
                    return None
            """,
            "TOOL",
            "registering the plugin failed: RegistrationError:",
            id="misspelled-hookimpl-argument",
        ),
        pytest.param(
            PLUGINS_GROUP,
            "from .common import tool\nTOOL = tool('misplaced')\n",
            "TOOL",
            "registering the plugin failed: RegistrationError:",
            id="plugin-wrong-type",
        ),
        pytest.param(
            PLUGINS_GROUP,
            "class TOOL:\n    def __init__(self):\n        raise OSError('no socket')\n",
            "TOOL",
            "instantiating TOOL() raised OSError: no socket",
            id="plugin-class-raises",
        ),
    ],
)
def test_each_broken_entry_point_is_reported_and_the_others_load(
    site: Site, caplog: pytest.LogCaptureFixture, group: str, source: str, attr: str, cause: str
) -> None:
    good = site.module("good", "from .common import tool\nGOOD = tool('good')\n")
    broken = site.module("broken", source)
    value = f"{broken}:{attr}" if attr else broken
    site.dist("good-dist", {TOOLS_GROUP: {"good": f"{good}:GOOD"}}, version="1.0")
    site.dist("bad-dist", {group: {"bad": value}}, version="6.6.6")
    registry = ToolRegistry()
    registry.register(_tool("taken"))

    report = load_plugins(registry, only=only_dist("good-dist", "bad-dist"))

    assert not report.ok
    assert [record.name for record in report.loaded] == ["good"]
    assert registry.get("good") is not None
    (failure,) = report.failed
    kind = {TOOLS_GROUP: "tools", GUARDS_GROUP: "guards", PLUGINS_GROUP: "plugins"}[group]
    assert failure == PluginFailure("bad", kind, "bad-dist", "6.6.6", value, failure.error)
    assert failure.error.startswith(cause)
    assert_names_origin(failure.message, "bad-dist", "6.6.6", group, "bad", value)
    assert failure.message.endswith(failure.error)
    assert [r.getMessage() for r in caplog.records if r.name == "dsh_tools"] == [
        f"plugin not loaded: {failure.message}"
    ]
    assert registry.plugin_manager.get_plugin("bad") is None
    assert run(registry, "good").content[0]["text"] == "good"  # no guard or hook leaked in


def test_misspelled_names_reach_the_report(site: Site) -> None:
    """The registry's cause is kept verbatim, so the author sees which name is wrong."""
    module = site.module(
        "typos",
        """
        from dsh_tools.hookspecs import hookimpl

        class Arg:
            @hookimpl
            def dsh_tools_guard(self, executoin):
                return None

        class Hook:
            @hookimpl
            def dsh_tools_pre_exec(self, execution):
                return None
        """,
    )
    site.dist("typo-dist", {PLUGINS_GROUP: {"arg": f"{module}:Arg", "hook": f"{module}:Hook"}})
    report = load_plugins(ToolRegistry(), only=only_dist("typo-dist"))
    errors = {failure.name: failure.error for failure in report.failed}
    assert "executoin" in errors["arg"]
    assert "dsh_tools_pre_exec" in errors["hook"]


def test_an_entry_point_is_all_or_nothing(site: Site) -> None:
    module = site.module(
        "pair", "from .common import tool\nPAIR = [tool('alpha'), tool('taken')]\n"
    )
    site.dist("pair-dist", {TOOLS_GROUP: {"pair": f"{module}:PAIR"}})
    registry = ToolRegistry()
    registry.register(_tool("taken"))

    report = load_plugins(registry, only=only_dist("pair-dist"))

    assert report.failed[0].error.startswith('registering tool "taken" failed')
    assert registry.get("alpha") is None


def _tool(name: str) -> Any:
    from dsh_tools._define import define_tool

    return define_tool(name=name, description=name, parameters={}, execute=lambda a, c: name)


# --------------------------------------------------------------------------- strict


def test_strict_raises_one_error_listing_every_failure_and_undoes_the_call(site: Site) -> None:
    good = site.module(
        "good",
        """
        from dsh_tools.hookspecs import hookimpl
        from .common import tool

        GOOD = tool("good")

        def deny_all(execution):
            return "denied by the strict test"

        class Observer:
            @hookimpl
            def dsh_tools_result(self, execution, result):
                pass
        """,
    )
    site.dist(
        "good-dist",
        {
            TOOLS_GROUP: {"good": f"{good}:GOOD"},
            GUARDS_GROUP: {"deny-all": f"{good}:deny_all"},
            PLUGINS_GROUP: {"observer": f"{good}:Observer"},
        },
    )
    site.dist(
        "bad-dist",
        {
            TOOLS_GROUP: {"missing": "dsh_fake_missing_module:TOOL"},
            PLUGINS_GROUP: {"not-a-plugin": f"{good}:GOOD"},
        },
        version="0.0.1",
    )
    earlier = site.module("earlier", "from .common import tool\nEARLIER = tool('earlier')\n")
    site.dist("earlier-dist", {TOOLS_GROUP: {"earlier": f"{earlier}:EARLIER"}})
    registry = ToolRegistry()
    assert load_plugins(registry, only=only_dist("earlier-dist"), strict=True).ok

    with pytest.raises(PluginError) as caught:
        load_plugins(registry, only=only_dist("good-dist", "bad-dist"), strict=True)

    message = str(caught.value)
    assert caught.value.code == "PLUGIN_ERROR"
    assert message.startswith(
        "2 plugin entry point(s) failed to load "
        "(strict mode: every registration of this call was undone):\n  - "
    )
    assert_names_origin(
        message, "bad-dist", "0.0.1", TOOLS_GROUP, "missing", "dsh_fake_missing_module:TOOL"
    )
    assert "ModuleNotFoundError: No module named 'dsh_fake_missing_module'" in message
    assert_names_origin(message, "bad-dist", "0.0.1", PLUGINS_GROUP, "not-a-plugin", f"{good}:GOOD")
    assert registry.names() == ["earlier"]  # the earlier call's tool stays
    assert registry.plugin_manager.get_plugin("observer") is None
    assert not run(registry, "earlier").is_error  # the guard was removed too

    again = load_plugins(registry, only=only_dist("good-dist"), strict=True)
    assert [record.name for record in again.loaded] == ["good", "deny-all", "observer"]


# --------------------------------------------------------------------------- selection


@pytest.fixture
def tripwires(site: Site, tmp_path: Path) -> dict[str, Path]:
    """Two distributions whose modules leave a marker file when imported, then raise."""
    markers = {}
    for name in ("trip-a", "trip-b"):
        marker = markers[name] = tmp_path / f"{name}.imported"
        module = site.module(
            name.replace("-", "_"),
            f"open({str(marker)!r}, 'w').close()\nraise RuntimeError('must not be imported')\n",
        )
        site.dist(f"{name}-dist", {TOOLS_GROUP: {name: f"{module}:TOOL"}})
    safe = site.module("safe", "from .common import tool\nSAFE = tool('safe')\n")
    site.dist("safe-dist", {TOOLS_GROUP: {"safe": f"{safe}:SAFE"}})
    return markers


TRIPWIRE_DISTS = only_dist("trip-a-dist", "trip-b-dist", "safe-dist")


def test_blocked_entry_points_are_never_imported(site: Site, tripwires: dict[str, Path]) -> None:
    report = load_plugins(ToolRegistry(), block=["trip-a", "trip-b"], only=TRIPWIRE_DISTS)
    assert report.ok
    assert sorted(report.blocked) == ["trip-a", "trip-b"]
    assert [record.name for record in report.loaded] == ["safe"]
    assert not any(marker.exists() for marker in tripwires.values())
    assert not site.imported("trip_a")


def test_blocking_through_the_environment_by_name_and_by_distribution(
    site: Site, tripwires: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BLOCK_ENV_VAR, " trip-a , ,dist:Trip_B.Dist ")
    report = load_plugins(ToolRegistry(), only=TRIPWIRE_DISTS)
    assert report.ok
    assert sorted(report.blocked) == ["trip-a", "trip-b"]
    assert not any(marker.exists() for marker in tripwires.values())


def test_block_argument_and_environment_add_up(
    site: Site, tripwires: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BLOCK_ENV_VAR, "trip-a")
    report = load_plugins(ToolRegistry(), block=["dist:trip-b-dist"], only=TRIPWIRE_DISTS)
    assert sorted(report.blocked) == ["trip-a", "trip-b"]
    assert not any(marker.exists() for marker in tripwires.values())


def test_only_restricts_by_name_and_block_wins(site: Site, tripwires: dict[str, Path]) -> None:
    registry = ToolRegistry()
    report = load_plugins(registry, only=["safe", "trip-a"], block=["trip-a"])
    assert [record.name for record in report.loaded] == ["safe"]
    assert report.blocked == ("trip-a",)
    assert not any(marker.exists() for marker in tripwires.values())
    assert load_plugins(ToolRegistry(), only=[]).loaded == ()


def test_a_tripwire_is_one_warning_line_and_its_traceback_is_at_debug_level(
    site: Site, tripwires: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="dsh_tools")
    report = load_plugins(ToolRegistry(), block=["trip-b"], only=TRIPWIRE_DISTS)
    (failure,) = report.failed
    assert failure.error == "import failed: RuntimeError: must not be imported"
    warning, debug = [record for record in caplog.records if record.name == "dsh_tools"]
    assert (warning.levelno, warning.exc_info) == (logging.WARNING, None)
    assert warning.getMessage() == f"plugin not loaded: {failure.message}"
    assert "\n" not in warning.getMessage()
    assert debug.levelno == logging.DEBUG
    assert debug.exc_info is not None
    assert "must not be imported" in str(debug.exc_info[1])
    assert tripwires["trip-a"].exists()
    assert not tripwires["trip-b"].exists()


# --------------------------------------------------------------------------- idempotency


def test_loading_twice_into_one_registry_is_idempotent(site: Site, tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    module = site.module(
        "counted",
        f"""
        from .common import tool

        def make():
            with open({str(calls)!r}, "a") as f:
                f.write("x")
            return [tool("counted")]

        def guard(execution):
            return None
        """,
    )
    site.dist(
        "counted-dist",
        {TOOLS_GROUP: {"counted": f"{module}:make"}, GUARDS_GROUP: {"g": f"{module}:guard"}},
    )
    registry = ToolRegistry()
    first = load_plugins(registry, only=only_dist("counted-dist"))
    second = load_plugins(registry, only=only_dist("counted-dist"), strict=True)

    assert second == first
    assert calls.read_text() == "x"
    assert registry.names() == ["counted"]

    other = ToolRegistry()
    assert load_plugins(other, only=only_dist("counted-dist")).loaded == first.loaded
    assert calls.read_text() == "xx"


# --------------------------------------------------------------------------- report


def test_report_formats_a_plain_text_table() -> None:
    report = LoadReport(
        loaded=(
            PluginRecord("shout", "tools", "demo", "0.3.1", "demo.tools:shout", ("shout",)),
            PluginRecord("rev", "plugins", "demo", "0.3.1", "demo.rev", (), ("a_hook", "b")),
        ),
        failed=(PluginFailure("bad", "guards", "broken", "2.0", "b:X", "import failed: E: x"),),
        blocked=("off", "also-off"),
    )
    assert report.format().splitlines() == [
        "STATUS  KIND     NAME   DISTRIBUTION  VERSION  ENTRY POINT       DETAILS",
        "loaded  tools    shout  demo          0.3.1    demo.tools:shout  tools: shout",
        "loaded  plugins  rev    demo          0.3.1    demo.rev          hooks: a_hook, b",
        "failed  guards   bad    broken        2.0      b:X               import failed: E: x",
        "blocked: off, also-off",
        "2 loaded, 1 failed, 2 blocked",
    ]
    assert not report.ok
    assert LoadReport().ok
    assert LoadReport().format() == "no plugins loaded\n0 loaded, 0 failed, 0 blocked"
    assert report.failed[0].message == (
        "broken 2.0: entry point [dsh_tools.guards] bad = b:X: import failed: E: x"
    )


# --------------------------------------------------------------------------- real install

HOST = """
import json, os, sys

import attrs

from dsh_tools.errors import PluginError
from dsh_tools._models import ToolExecutionInput
from dsh_tools._plugins.loading import load_plugins
from dsh_tools._registry import ToolRegistry


def report_json(report):
    return {
        "loaded": [attrs.asdict(r) for r in report.loaded],
        "failed": [dict(attrs.asdict(f), message=f.message) for f in report.failed],
        "blocked": list(report.blocked),
        "ok": report.ok,
        "table": report.format(),
    }


def text(result):
    return {"is_error": result.is_error, "text": result.content[0]["text"]}


out = {}
os.environ["DSH_TOOLS_BLOCK_PLUGINS"] = "dist:dsh-broken-plugin"
blocked = load_plugins(ToolRegistry())
out["env_blocked"] = dict(report_json(blocked), broken_imported="dsh_broken_plugin" in sys.modules)
del os.environ["DSH_TOOLS_BLOCK_PLUGINS"]

unattended = ToolRegistry()
load_plugins(unattended)
out["unasked"] = text(unattended.execute_sync(ToolExecutionInput("c0", "shout", {"text": "hi"})))

asked = []
registry = ToolRegistry(approval=lambda request: asked.append(request.tool_name) or "allowed-once")
out["default"] = report_json(load_plugins(registry))
host = registry.scope("host")
out["shout"] = text(host.execute_sync(ToolExecutionInput("c1", "shout", {"text": "hi"})))
out["secret"] = text(host.execute_sync(ToolExecutionInput("c2", "shout", {"text": "secret"})))
out["invalid"] = text(host.execute_sync(ToolExecutionInput("c3", "shout", {"text": 3})))
out["asked"] = asked

strict = ToolRegistry()
try:
    load_plugins(strict, strict=True)
except PluginError as error:
    out["strict_error"] = str(error)
out["strict_left"] = {
    "tools": strict.names(),
    "reviewer": strict.plugin_manager.get_plugin("demo-reviewer") is not None,
}
print(json.dumps(out))
"""


def _venv_python(root: Path) -> Path:
    return root / ("Scripts" if os.name == "nt" else "bin") / "python"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Pip-install both fixture distributions into a throwaway venv; run HOST there.

    The venv is made without pip and sees this environment through a ``.pth`` file:
    ``--system-site-packages`` alone would expose the *base* interpreter's packages, not
    those of the virtualenv the tests run in (where dsh-tools, pip and hatchling are).
    """
    root = tmp_path_factory.mktemp("plugin-venv")
    try:
        venv.EnvBuilder(system_site_packages=True, with_pip=False).create(root)
    except Exception as exc:  # pragma: no cover - depends on the platform
        pytest.skip(f"cannot create a virtualenv here ({type(exc).__name__}: {exc})")
    python = str(_venv_python(root))
    env = {k: v for k, v in os.environ.items() if k != BLOCK_ENV_VAR}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PYTHONDONTWRITEBYTECODE="1")
    inner_site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    ).stdout.strip()
    outer = [
        sysconfig.get_path("purelib"),
        sysconfig.get_path("platlib"),
        str(Path(dsh_tools.__file__).parents[1]),
    ]
    (Path(inner_site) / "_outer_environment.pth").write_text(
        f"import site; list(map(site.addsitedir, {outer!r}))\n"
    )
    pip = subprocess.run(
        [
            python,
            *("-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"),
            *("--no-index", "--no-cache-dir"),
            str(FIXTURES / "dsh-demo-plugin"),
            str(FIXTURES / "dsh-broken-plugin"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert pip.returncode == 0, f"installing the fixture distributions failed:\n{pip.stderr}"
    host = subprocess.run([python, "-c", HOST], capture_output=True, text=True, env=env, timeout=60)
    assert host.returncode == 0, host.stderr
    result: dict[str, Any] = json.loads(host.stdout)
    return result


def _ours(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    dists = {"dsh-demo-plugin", "dsh-broken-plugin"}
    return {entry["name"]: entry for entry in entries if entry["distribution"] in dists}


def test_installed_demo_plugin_loads_and_runs_through_the_pipeline(
    installed: dict[str, Any],
) -> None:
    loaded = _ours(installed["default"]["loaded"])
    assert loaded == {
        "demo-shout": {
            "name": "demo-shout",
            "kind": "tools",
            "distribution": "dsh-demo-plugin",
            "version": "0.3.1",
            "entry_point": "dsh_demo_plugin.tools:shout",
            "tools": ["shout"],
            "hooks": [],
        },
        "demo-no-secrets": {
            "name": "demo-no-secrets",
            "kind": "guards",
            "distribution": "dsh-demo-plugin",
            "version": "0.3.1",
            "entry_point": "dsh_demo_plugin.guards:no_secrets",
            "tools": [],
            "hooks": ["dsh_tools_guard"],
        },
        "demo-reviewer": {
            "name": "demo-reviewer",
            "kind": "plugins",
            "distribution": "dsh-demo-plugin",
            "version": "0.3.1",
            "entry_point": "dsh_demo_plugin.reviewer",
            "tools": [],
            "hooks": ["dsh_tools_post_execute"],
        },
    }
    # The default rules do not know a third-party tool: a person is asked before it
    # runs, and a host with nobody to ask runs it not.
    assert installed["unasked"] == {
        "is_error": True,
        "text": 'Error: no permission rule in default_rules() covers tool "shout"',
    }
    # Only the call that can run is put to a person: the guard would deny the secret,
    # so that call is denied before anyone is asked, and invalid arguments ask nobody.
    assert installed["asked"] == ["shout"]
    assert installed["shout"] == {"is_error": False, "text": "HI (reviewed)"}
    assert installed["secret"] == {
        "is_error": True,
        "text": "Error: arguments must not contain secrets",
    }
    assert installed["invalid"]["is_error"]
    assert "demo-shout" in installed["default"]["table"]


def test_installed_broken_plugin_reports_each_entry_point(installed: dict[str, Any]) -> None:
    failed = _ours(installed["default"]["failed"])
    assert not installed["default"]["ok"]
    assert sorted(failed) == ["broken-hook", "broken-import", "broken-type"]
    expected = {
        "broken-import": (
            TOOLS_GROUP,
            "dsh_broken_plugin.needs_missing:TOOL",
            "import failed: ModuleNotFoundError: No module named "
            "'dsh_broken_plugin_missing_dependency'",
        ),
        "broken-type": (
            GUARDS_GROUP,
            "dsh_broken_plugin:NOT_A_GUARD",
            "expected a guard function fn(execution) -> str | None, got int",
        ),
        "broken-hook": (
            PLUGINS_GROUP,
            "dsh_broken_plugin:MisspelledHook",
            "registering the plugin failed: RegistrationError:",
        ),
    }
    for name, (group, value, cause) in expected.items():
        failure = failed[name]
        assert (failure["distribution"], failure["version"]) == ("dsh-broken-plugin", "2.0.0")
        assert failure["entry_point"] == value
        assert failure["error"].startswith(cause)
        assert_names_origin(failure["message"], "dsh-broken-plugin", "2.0.0", group, name, value)
    assert "dsh_tools_pre_exec" in failed["broken-hook"]["error"]


def test_installed_strict_mode_lists_every_failure_and_keeps_nothing(
    installed: dict[str, Any],
) -> None:
    message = installed["strict_error"]
    for name in ("broken-import", "broken-type", "broken-hook"):
        assert f"] {name} = dsh_broken_plugin" in message
    assert message.count("dsh-broken-plugin 2.0.0: entry point") == 3
    assert installed["strict_left"] == {"tools": [], "reviewer": False}


def test_installed_distribution_blocked_from_the_environment_is_not_imported(
    installed: dict[str, Any],
) -> None:
    report = installed["env_blocked"]
    assert sorted(report["blocked"]) == ["broken-hook", "broken-import", "broken-type"]
    assert report["broken_imported"] is False
    assert _ours(report["failed"]) == {}
    assert sorted(_ours(report["loaded"])) == ["demo-no-secrets", "demo-reviewer", "demo-shout"]


def test_a_factory_function_in_the_plugins_group_is_called_for_its_plugin(site: Site) -> None:
    module = site.module(
        "factory",
        """
        from dsh_tools import Deny, hookimpl

        class Policy:
            @hookimpl
            def dsh_tools_pre_execute(self, execution):
                return Deny("factory-made policy")

        def make():
            return Policy()
        """,
    )
    site.dist("factory-dist", {PLUGINS_GROUP: {"factory": f"{module}:make"}})
    registry = ToolRegistry()
    report = load_plugins(registry, only=only_dist("factory-dist"))
    assert [record.hooks for record in report.loaded] == [("dsh_tools_pre_execute",)]
    result = run(registry, "anything")
    assert result.is_error
    assert result.error.message == "factory-made policy"


# --------------------------------------------------------------------------- conflicts


def test_block_and_only_names_that_match_nothing_are_reported(
    site: Site, tripwires: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    report = load_plugins(
        ToolRegistry(),
        block=["trip-a", "trip-b", "trip-c", "dist:no-such-dist"],
        only=["safe", "dist:safe-dist", "saef"],
    )
    assert report.unmatched == ("trip-c", "dist:no-such-dist", "saef")
    assert [r.getMessage() for r in caplog.records if r.name == "dsh_tools"] == [
        "no installed plugin entry point matches 'trip-c'",
        "no installed plugin entry point matches 'dist:no-such-dist'",
        "no installed plugin entry point matches 'saef'",
    ]
    assert report.format().splitlines()[-2] == (
        "matched no entry point: trip-c, dist:no-such-dist, saef"
    )
    assert report.ok  # nothing failed to load; --strict in the command fails on it


def test_the_first_of_two_distributions_with_one_name_wins_and_the_other_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sites = [Site.fresh(tmp_path / name) for name in ("later", "earlier")]
    for current in sites:
        monkeypatch.syspath_prepend(str(current.root))  # so "earlier" ends up first
    earlier = sites[1]
    for current in sites:
        module = current.module(
            "policy",
            f"""
            from dsh_tools.hookspecs import hookimpl

            @hookimpl
            def dsh_tools_guard(execution):
                return "guarded by {current.root.name}"
            """,
        )
        current.dist(f"{current.root.name}-dist", {PLUGINS_GROUP: {"acme": module}})
    registry = ToolRegistry()

    report = load_plugins(registry, only=["acme"])

    assert [(r.name, r.distribution) for r in report.loaded] == [("acme", "earlier-dist")]
    (failure,) = report.failed
    assert failure.distribution == "later-dist"
    assert failure.error == (
        f"the name is also declared by earlier-dist 1.2.3 ({earlier.pkg}.policy), which comes "
        "first on sys.path and is the one loaded; block one of them (dist:<distribution>)"
    )
    assert report.policy_failures == (failure,)
    assert run(registry, "anything").error.message == "guarded by earlier"

    chosen = ToolRegistry()
    again = load_plugins(chosen, only=["acme"], block=["dist:earlier-dist"])
    assert (again.ok, again.blocked) == (True, ("acme",))
    assert run(chosen, "anything").error.message == "guarded by later"
