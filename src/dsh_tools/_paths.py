"""Path declarations: which arguments of a tool name places in the file system, and how.

A tool declares them (``define_tool(paths=ToolPaths(...))``) so that path rules judge the
place the tool will open, resolved as the tool resolves it, instead of guessing argument
names and comparing text. The records are frozen and checked when made; that the names
are parameters of the tool is checked by :class:`~dsh_tools.ToolDefinition`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Literal

import attrs

from ._tuples import tuple_of
from .errors import DefinitionError

__all__ = ["PathArgument", "PathKind", "ToolPaths"]

PathKind = Literal["file", "directory", "tree", "pattern"]
"""How a tool uses a path argument (see :class:`PathArgument`)."""

_PATH_KINDS: tuple[PathKind, ...] = ("file", "directory", "tree", "pattern")


def _argument_name(instance: PathArgument, attribute: object, value: str) -> None:
    if not isinstance(value, str) or not value:
        raise DefinitionError(f"a path argument's name must be a non-empty string, got {value!r}")


def _path_kind(instance: PathArgument, attribute: object, value: object) -> None:
    if value not in _PATH_KINDS:
        raise DefinitionError(
            f"path argument {instance.name!r}: kind must be one of "
            f"{', '.join(map(repr, _PATH_KINDS))}, got {value!r}"
        )


@attrs.frozen
class PathArgument:
    """One argument of a tool that names a place in the file system, and how it is used.

    Path rules (:mod:`dsh_tools_plugins.permissions`) read these declarations instead of
    guessing argument names. ``kind`` says what the tool touches through the argument:

    * ``"file"``: the file it names (read, written or edited);
    * ``"directory"``: the directory it names (listed, or a command's working directory),
      not what lies below it;
    * ``"tree"``: the file or directory it names and everything below it (a search root);
    * ``"pattern"``: a glob that narrows the walk of the ``"tree"`` argument named
      ``within``. Its literal leading components (those before the first one with
      ``*``, ``?``, ``[`` or ``{``, and never the last one) are a directory relative to
      the argument named ``relative_to``, or to the tool's base directory when
      ``relative_to`` is ``None``; the walk reaches only what lies below both. A pattern
      never widens what a tree reaches, so leaving one undeclared only makes rules
      stricter.

    An absent argument takes its default from the parameters schema; one with no
    default (or ``null``) touches nothing.
    """

    name: str = attrs.field(validator=_argument_name)
    kind: PathKind = attrs.field(validator=_path_kind)
    within: str | None = attrs.field(default=None, kw_only=True)
    relative_to: str | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if (self.kind == "pattern") != (self.within is not None):
            raise DefinitionError(
                f"path argument {self.name!r}: a pattern needs within= (the tree argument "
                "it narrows), and only a pattern takes it"
            )
        if self.relative_to is not None and self.kind != "pattern":
            raise DefinitionError(f"path argument {self.name!r}: only a pattern takes relative_to=")


def _path_arguments(value: Iterable[PathArgument]) -> tuple[PathArgument, ...]:
    arguments = tuple_of(PathArgument, value, "ToolPaths arguments", DefinitionError)
    kinds = {argument.name: argument.kind for argument in arguments}
    if len(kinds) != len(arguments):
        raise DefinitionError("ToolPaths declares an argument twice")
    for argument in arguments:
        if argument.within is not None and kinds.get(argument.within) != "tree":
            raise DefinitionError(
                f"path argument {argument.name!r}: within={argument.within!r} must name a "
                '"tree" argument of the same declaration'
            )
        if argument.relative_to is not None and kinds.get(argument.relative_to) not in (
            "tree",
            "directory",
        ):
            raise DefinitionError(
                f"path argument {argument.name!r}: relative_to={argument.relative_to!r} "
                'must name a "tree" or "directory" argument of the same declaration'
            )
    return arguments


@attrs.frozen
class ToolPaths:
    """The path arguments a tool declares, and how the tool resolves a path.

    ``resolve(text)`` returns the absolute location the tool opens for the spelling
    ``text`` (relative spellings against the tool's base directory), resolved the way
    the tool itself resolves it, and raises when the tool would refuse it. The default,
    :func:`os.path.realpath`, fits a tool that opens paths as the operating system does,
    relative to the working directory. The workspace tools pass
    :meth:`dsh_tools_plugins.workspace.Workspace.locate`. Rules also follow symbolic
    links in what ``resolve`` returns.
    """

    arguments: tuple[PathArgument, ...] = attrs.field(converter=_path_arguments)
    resolve: Callable[[str], str] = attrs.field(default=os.path.realpath, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if not callable(self.resolve):
            raise DefinitionError("ToolPaths resolve must be callable")
