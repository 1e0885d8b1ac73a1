"""Every exception class is a ``DshToolsError`` but the internal signals named here, and
the tree drawn in :mod:`dsh_tools.errors`' docstring is the classes' own."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import dsh_tools.errors
from dsh_tools.errors import DshToolsError
from test_public_face import is_private, module_names

SOURCES = Path(__file__).resolve().parents[1] / "src"

SIGNALS = frozenset(
    {
        # A schema, a value or a pattern a fast path cannot take: the slow path runs.
        "dsh_tools._schema.arguments._Unsupported",
        "dsh_tools._json._Rejected",
        "dsh_tools._schema.codegen._NotInlined",
        "dsh_tools_plugins._reach._Unresolved",
        "dsh_tools_plugins._search.ripgrep._Unsupported",
        # The call path's own: each ends as the call's result, never raised to a caller.
        "dsh_tools._pipeline.call.Interrupted",
        "dsh_tools._pipeline.call.StageFailed",
        "dsh_tools._pipeline.loops.NeedsEventLoop",
        "dsh_tools._pipeline.stream.FilterFailed",
        # One entry point's failure, which becomes a PluginFailure in the load report.
        "dsh_tools._plugins.loaders.LoadFailure",
        # The command's: each becomes a line on standard error and an exit code.
        "dsh_tools.cli._exits.PluginsFailed",
        "dsh_tools.cli._exits.Refused",
        "dsh_tools.cli._exits.UsageError",
        "dsh_tools.cli._inbox._StoreFailed",
        "dsh_tools.cli._parser.ArgumentsRejected",
    }
)
"""Exceptions raised and caught inside the package, never seen by a caller."""


def exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class the two packages define, by its qualified name."""
    found: dict[str, type[BaseException]] = {}
    for package in ("dsh_tools", "dsh_tools_plugins"):
        for name in module_names(SOURCES / package):
            if name.endswith(".__main__"):
                continue
            for value in vars(importlib.import_module(name)).values():
                if (
                    inspect.isclass(value)
                    and issubclass(value, BaseException)
                    and value.__module__ == name
                ):
                    found[f"{name}.{value.__qualname__}"] = value
    return found


def public_modules() -> list[str]:
    """The public modules of the two packages (``__main__`` runs the command: left out)."""
    return [
        name
        for package in ("dsh_tools", "dsh_tools_plugins")
        for name in module_names(SOURCES / package)
        if not is_private(name) and not name.endswith(".__main__")
    ]


def exported_by(module: str, cls: type) -> bool:
    """Whether ``module`` offers ``cls`` (in its ``__all__`` where it has one)."""
    loaded = importlib.import_module(module)
    names = getattr(loaded, "__all__", None)
    return (names is None or cls.__name__ in names) and getattr(loaded, cls.__name__, None) is cls


_DRAWN = re.compile(
    r"^    (?P<branch>(?:[│ ]   )*(?:[├└]── )?)(?P<name>\w+)"
    r"(?: \((?P<also>[\w, ]+)\))? +(?P<where>\S.*)$"
)


def drawn_tree(doc: str) -> dict[str, tuple[str | None, tuple[str, ...], str]]:
    """The tree in ``doc`` (the first block after ``::``): each class's parent, the
    builtin exceptions it is too, and where it is imported from."""
    block = doc.split("::\n\n", 1)[1].split("\n\n", 1)[0]
    tree: dict[str, tuple[str | None, tuple[str, ...], str]] = {}
    path: list[str] = []
    for line in block.splitlines():
        match = _DRAWN.match(line)
        assert match, f"not a line of the tree: {line!r}"
        del path[len(match["branch"]) // 4 :]
        also = tuple(match["also"].split(", ")) if match["also"] else ()
        tree[match["name"]] = (path[-1] if path else None, also, match["where"])
        path.append(match["name"])
    return tree


def tree_problems(
    doc: str, classes: dict[str, type[BaseException]], public: list[str]
) -> list[str]:
    """How the tree drawn in ``doc`` differs from the public ``DshToolsError`` classes
    among ``classes``, each exported by one of the ``public`` modules or by none."""
    errors = {
        cls.__name__: cls
        for cls in classes.values()
        if issubclass(cls, DshToolsError) and not cls.__name__.startswith("_")
    }
    tree = drawn_tree(doc)
    problems = [f"{name} is not drawn" for name in sorted(errors.keys() - tree.keys())]
    problems += [f"{name} is drawn but no such error" for name in sorted(tree.keys() - errors)]
    for name in sorted(errors.keys() & tree.keys()):
        cls = errors[name]
        parent = next((base for base in cls.__mro__[1:] if base in errors.values()), None)
        also = tuple(
            base.__name__
            for base in cls.__bases__
            if base.__module__ == "builtins"
            and base is not Exception
            and not (parent and issubclass(parent, base))
        )
        drawn_parent, drawn_also, where = tree[name]
        parent_name = parent.__name__ if parent else None
        if drawn_parent != parent_name:
            problems.append(f"{name} is drawn under {drawn_parent}, but is under {parent_name}")
        if drawn_also != also:
            problems.append(f"{name} is drawn as also {drawn_also}, but is also {also}")
        if where == "not exported":
            offered = [module for module in public if exported_by(module, cls)]
            if offered:
                problems.append(f"{name} is drawn as not exported, but {offered[0]} exports it")
        elif where not in public or not exported_by(where, cls):
            problems.append(f"{name} is drawn in {where}, which does not export it")
    return problems


def test_every_exception_is_a_dsh_tools_error_but_the_signals() -> None:
    classes = exception_classes()
    others = {name for name, cls in classes.items() if not issubclass(cls, DshToolsError)}
    assert others == SIGNALS


def test_the_drawn_tree_is_the_classes_tree() -> None:
    assert dsh_tools.errors.__doc__ is not None
    assert tree_problems(dsh_tools.errors.__doc__, exception_classes(), public_modules()) == []


def test_the_check_sees_each_way_the_drawing_can_be_wrong() -> None:
    class WireError(DshToolsError, ValueError):
        """Drawn under the wrong parent, without its ValueError, in a module not its own."""

    class StoreError(DshToolsError):
        """Not drawn at all."""

    class _Hidden(WireError):
        """Private: never drawn."""

    classes = {
        "dsh_tools.errors.DshToolsError": DshToolsError,
        "dsh_tools.errors.ToolError": dsh_tools.errors.ToolError,
        "dsh_tools.errors.JsonValueError": dsh_tools.errors.JsonValueError,
        "x.WireError": WireError,
        "x.StoreError": StoreError,
        "x._Hidden": _Hidden,
    }
    doc = (
        "The tree::\n\n"
        "    DshToolsError                   dsh_tools\n"
        "    ├── ToolError                   dsh_tools.records\n"
        "    │   └── WireError               not exported\n"
        "    ├── JsonValueError              not exported\n"
        "    └── GoneError                   dsh_tools\n"
        "\nMore text.\n"
    )

    assert tree_problems(doc, classes, ["dsh_tools", "dsh_tools.errors", "dsh_tools.records"]) == [
        "StoreError is not drawn",
        "GoneError is drawn but no such error",
        "JsonValueError is drawn as also (), but is also ('ValueError',)",
        "JsonValueError is drawn as not exported, but dsh_tools exports it",
        "ToolError is drawn in dsh_tools.records, which does not export it",
        "WireError is drawn under ToolError, but is under DshToolsError",
        "WireError is drawn as also (), but is also ('ValueError',)",
    ]
