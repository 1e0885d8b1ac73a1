"""Render intents ("cards"): how a tool wants its call and its result shown in a UI.

A tool's ``present_call`` returns a pending-state :data:`ToolCallView` and its
``present_result`` a completed-state :data:`ToolResultView`. Both are closed unions a UI
bridge switches on, provider-neutral so a tool never depends on a client protocol (the ACP
bridge maps them to ACP content; a CLI prints them).

Wire format (what :func:`unstructure_view` produces and the ``structure_*`` functions read):

* Keys are camelCase (``rawInput``, ``oldText``, ``exitCode``, ``totalLines`` ...), the
  spelling of the seed protocol and of the editors that consume it, so a bridge forwards
  a card without renaming anything. Python attributes stay snake_case.
* The union tag is ``card``; the two cards that come in several shapes carry a second
  tag: ``shape`` for ``search`` (``matches``/``paths``), ``kind`` for ``web``
  (``search``/``fetch``). An unknown tag is rejected, never guessed.
* An optional field is omitted while it holds its default (``None`` or an empty tuple),
  so the JSON never carries ``null`` for "absent". Reading tolerates an explicit ``null``
  as absent. Two fields are always written: ``FileDiff.oldText`` (``null`` means a new
  file, which is information, not absence) and ``diffs`` on a result diff card (the seed
  makes it required). An empty ``content`` tuple is written as ``[]``: it means "show
  nothing", unlike an absent ``content`` which means "show the raw result".
* ``rawInput`` and ``content`` are kept as deep-frozen JSON (:mod:`dsh_tools._json`), so
  every card is immutable and hashable.

Reading is strict: no coercion (``"1"`` is not an integer, ``1`` is not a boolean),
unknown keys are errors, and every problem is reported in one :class:`CardError` whose
message names each JSON path, for example ``result view.diffs[0].newText: expected a
string``.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias

import attrs

# FrozenDict and FrozenList must be names here: cattrs resolves JsonValue's forward references
# in this module's namespace.
from .._json import FrozenDict, FrozenList, JsonValue  # noqa: F401
from ._fields import (
    CardError,
    ContentBlocks,
    _always_emit,
    _check_total,
    _count,
    _freeze_content,
    _freeze_json,
    _Invalid,
    _one_based,
    _paths,
)

__all__ = [
    "DIFF_MATCH_LINES",
    "CardError",
    "ContentBlocks",
    "DiffCallView",
    "DiffResultView",
    "FileDiff",
    "FileLocation",
    "GenericCallView",
    "GenericResultView",
    "ReadFileLine",
    "ReadResultView",
    "SearchFileMatches",
    "SearchMatch",
    "SearchMatchesView",
    "SearchPathsView",
    "TerminalCallView",
    "TerminalResultView",
    "ToolCallKind",
    "ToolCallView",
    "ToolResultView",
    "WebFetchView",
    "WebSearchView",
    "WebSource",
    "command_reach",
    "fallback_call_view",
    "file_diffs",
    "structure_call_view",
    "structure_result_view",
    "unstructure_view",
]


# Typed tuple converters: records take any iterable (a list is natural to write) and keep
# a tuple. One named function per element type, because mypy's attrs plugin cannot bind a
# generic converter's type variable.


def _locations(items: Iterable[FileLocation]) -> tuple[FileLocation, ...]:
    return tuple(items)


def _diffs(items: Iterable[FileDiff]) -> tuple[FileDiff, ...]:
    return tuple(items)


def _matches(items: Iterable[SearchMatch]) -> tuple[SearchMatch, ...]:
    return tuple(items)


def _search_files(items: Iterable[SearchFileMatches]) -> tuple[SearchFileMatches, ...]:
    return tuple(items)


def _read_lines(items: Iterable[ReadFileLine]) -> tuple[ReadFileLine, ...]:
    return tuple(items)


def _sources(items: Iterable[WebSource]) -> tuple[WebSource, ...]:
    return tuple(items)


# --- shared file vocabulary -----------------------------------------------------------


class ToolCallKind(str, enum.Enum):
    """What a call does; picks the icon of a generic card (absent means ``other``)."""

    READ = "read"
    EDIT = "edit"
    DELETE = "delete"
    MOVE = "move"
    SEARCH = "search"
    EXECUTE = "execute"
    FETCH = "fetch"
    OTHER = "other"


@attrs.frozen
class FileLocation:
    """A file the call touches, optionally at a 1-based ``line`` (e.g. a read offset)."""

    path: str
    line: int | None = attrs.field(default=None, validator=_one_based)


@attrs.frozen
class FileDiff:
    """A change to one file; ``old_text=None`` when there is no before-image (new file)."""

    path: str
    old_text: str | None = attrs.field(metadata=_always_emit())
    new_text: str


@attrs.frozen
class ReadFileLine:
    """One line read from a file: its own 1-based ``number`` and text without newline."""

    number: int = attrs.field(validator=_one_based)
    text: str


@attrs.frozen
class SearchMatch:
    """One matching line: 1-based ``line_number`` and the line's text."""

    line_number: int = attrs.field(validator=_one_based)
    line: str


@attrs.frozen
class SearchFileMatches:
    """The matches found in one file, in the order the search reported them."""

    path: str
    matches: tuple[SearchMatch, ...] = attrs.field(converter=_matches)


@attrs.frozen
class WebSource:
    """A web search hit; ``published_at`` is an ISO-8601 string when the engine knows it."""

    url: str
    title: str | None = attrs.field(default=None, kw_only=True)
    snippet: str | None = attrs.field(default=None, kw_only=True)
    published_at: str | None = attrs.field(default=None, kw_only=True)


# --- call views (pending state) -------------------------------------------------------


@attrs.frozen
class GenericCallView:
    """Any call: a title, an icon ``kind``, the salient input and touched files.

    ``raw_input`` is shown as-is when it is a string and as pretty JSON otherwise;
    ``content`` takes content blocks (or text). Tools without a better card (search,
    read, web) use this with the matching ``kind`` while the call is pending.
    """

    title: str
    kind: ToolCallKind | None = attrs.field(default=None, kw_only=True)
    raw_input: JsonValue = attrs.field(default=None, kw_only=True, converter=_freeze_json)
    content: ContentBlocks | None = attrs.field(
        default=None, kw_only=True, converter=_freeze_content
    )
    locations: tuple[FileLocation, ...] = attrs.field(
        default=(), kw_only=True, converter=_locations
    )


@attrs.frozen
class TerminalCallView:
    """A shell command about to run: ``title`` is the command, ``cwd`` where it runs.

    A relative ``cwd`` is resolved by the UI against the session workspace; absent means
    the workspace itself. ``sandboxed`` says whether the command will run in an OS
    sandbox and ``network`` whether it can reach the network, so a user approving it
    sees what it can touch; absent means the tool does not say.
    """

    title: str
    description: str | None = attrs.field(default=None, kw_only=True)
    cwd: str | None = attrs.field(default=None, kw_only=True)
    sandboxed: bool | None = attrs.field(default=None, kw_only=True)
    network: bool | None = attrs.field(default=None, kw_only=True)


@attrs.frozen
class DiffCallView:
    """A file mutation about to happen, one :class:`FileDiff` per file, from the arguments."""

    title: str
    diffs: tuple[FileDiff, ...] = attrs.field(converter=_diffs)
    locations: tuple[FileLocation, ...] = attrs.field(
        default=(), kw_only=True, converter=_locations
    )


ToolCallView: TypeAlias = GenericCallView | TerminalCallView | DiffCallView
"""A pending-state card, tagged on ``card``: ``generic``, ``terminal`` or ``diff``."""


# --- result views (completed state) ---------------------------------------------------


@attrs.frozen(kw_only=True)
class GenericResultView:
    """Any result. Absent ``title`` keeps the pending title; absent ``content`` shows the
    raw result content."""

    title: str | None = None
    content: ContentBlocks | None = attrs.field(default=None, converter=_freeze_content)


@attrs.frozen(kw_only=True)
class TerminalResultView:
    """A finished process: its captured ``output`` and either ``exit_code`` (it exited) or
    ``signal`` such as ``"SIGTERM"`` (it was killed), never both; ``sandboxed`` and
    ``network`` as on :class:`TerminalCallView`."""

    title: str | None = None
    output: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    sandboxed: bool | None = None
    network: bool | None = None

    def __attrs_post_init__(self) -> None:
        if self.exit_code is not None and self.signal is not None:
            raise _Invalid(
                "cannot be set together with exitCode: a process either exits or is killed",
                where=".signal",
                label="TerminalResultView.signal",
            )


@attrs.frozen(kw_only=True)
class DiffResultView:
    """A completed mutation: the applied hunks with context (see :func:`file_diffs`).

    The completed view replaces the pending content, so mutation tools return it even
    when it repeats the call-time diff; otherwise result text would clobber the diff.
    """

    title: str | None = None
    diffs: tuple[FileDiff, ...] = attrs.field(default=(), converter=_diffs, metadata=_always_emit())


@attrs.frozen
class SearchMatchesView:
    """A content search: matching lines grouped by file in first-seen order.

    ``total`` counts matches before capping; ``truncated`` says whether some were left out.
    """

    title: str | None = attrs.field(default=None, kw_only=True)
    files: tuple[SearchFileMatches, ...] = attrs.field(converter=_search_files)
    truncated: bool = attrs.field(kw_only=True)
    total: int = attrs.field(kw_only=True, validator=_count)

    def __attrs_post_init__(self) -> None:
        _check_total(sum(len(entry.matches) for entry in self.files), self)


@attrs.frozen
class SearchPathsView:
    """A path search (glob, find): the paths found; ``total`` counts them before capping."""

    title: str | None = attrs.field(default=None, kw_only=True)
    paths: tuple[str, ...] = attrs.field(converter=_paths)
    truncated: bool = attrs.field(kw_only=True)
    total: int = attrs.field(kw_only=True, validator=_count)

    def __attrs_post_init__(self) -> None:
        _check_total(len(self.paths), self)


@attrs.frozen
class ReadResultView:
    """Lines read from a file. ``offset`` is the first requested line (1-based, kept even
    when ``lines`` is empty); ``lang`` hints highlighting; ``content`` is fallback text."""

    title: str | None = attrs.field(default=None, kw_only=True)
    path: str
    offset: int = attrs.field(kw_only=True, validator=_one_based)
    lines: tuple[ReadFileLine, ...] = attrs.field(kw_only=True, converter=_read_lines)
    total_lines: int = attrs.field(kw_only=True, validator=_count)
    lang: str | None = attrs.field(default=None, kw_only=True)
    content: str | None = attrs.field(default=None, kw_only=True)


@attrs.frozen
class WebSearchView:
    """A web search: the sources found and, when the engine gives one, an ``answer``."""

    title: str | None = attrs.field(default=None, kw_only=True)
    sources: tuple[WebSource, ...] = attrs.field(converter=_sources)
    answer: str | None = attrs.field(default=None, kw_only=True)
    truncated: bool = attrs.field(kw_only=True)


@attrs.frozen
class WebFetchView:
    """A fetched page: final ``url`` after redirects and HTTP status; the body is not
    repeated (a UI falls back to the raw result content)."""

    title: str | None = attrs.field(default=None, kw_only=True)
    url: str
    status_code: int = attrs.field(kw_only=True)
    truncated: bool = attrs.field(kw_only=True)


ToolResultView: TypeAlias = (
    GenericResultView
    | TerminalResultView
    | DiffResultView
    | SearchMatchesView
    | SearchPathsView
    | ReadResultView
    | WebSearchView
    | WebFetchView
)
"""A completed-state card, tagged on ``card`` (plus ``shape`` for search, ``kind`` for web)."""


# --- reading and writing cards as JSON (the converter lives in _card_json) ------


def structure_call_view(data: object) -> ToolCallView:
    """Read a pending-state card from JSON data; :class:`CardError` names each bad path."""
    from ._converter import structure

    view: ToolCallView = structure(data, ToolCallView, "call view")
    return view


def structure_result_view(data: object) -> ToolResultView:
    """Read a completed-state card from JSON data; :class:`CardError` names each bad path."""
    from ._converter import structure

    view: ToolResultView = structure(data, ToolResultView, "result view")
    return view


def unstructure_view(view: ToolCallView | ToolResultView) -> dict[str, Any]:
    """The card as plain JSON-ready data (camelCase keys, tags first, defaults omitted)."""
    from ._converter import unstructure

    return unstructure(view)


# --- helpers for tools ----------------------------------------------------------------


DIFF_MATCH_LINES = 500
"""A changed region longer than this many lines (on either side) is one hunk: matching
lines costs quadratic time, and a file of repeated lines would take minutes to diff."""


def file_diffs(
    path: str, before: str | None, after: str, *, context: int = 3
) -> tuple[FileDiff, ...]:
    """The change from ``before`` to ``after`` as one :class:`FileDiff` per hunk.

    Each hunk carries up to ``context`` unchanged lines on each side, so a UI can show
    where it sits without the whole file; hunks closer than ``2 * context`` lines merge.
    ``before=None`` (no before-image, e.g. a new file) gives one whole-file diff; equal
    texts give ``()``. Lines are matched only between the texts' common head and tail
    (found in linear time), and a region of more than :data:`DIFF_MATCH_LINES` changed
    lines is carried as one hunk, so any edit diffs in bounded time.
    """
    if before is None:
        return (FileDiff(path, None, after),)
    if before == after:
        return ()
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    head = _common_head(old, new)
    tail = _common_head(old[head:][::-1], new[head:][::-1])
    # Keep the context lines around the changed region; cut the rest of the head and tail.
    start, cut = max(0, head - context), max(0, tail - context)
    old, new = old[start : len(old) - cut], new[start : len(new) - cut]
    if max(len(old), len(new)) - (head - start) - (tail - cut) > DIFF_MATCH_LINES:
        return (FileDiff(path, "".join(old), "".join(new)),)
    # autojunk off: its popularity heuristic would swallow blank lines in long files
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    hunks = []
    for group in matcher.get_grouped_opcodes(context):
        old_start, new_start = group[0][1], group[0][3]
        old_end, new_end = group[-1][2], group[-1][4]
        hunks.append(
            FileDiff(path, "".join(old[old_start:old_end]), "".join(new[new_start:new_end]))
        )
    return tuple(hunks)


def _common_head(old: Sequence[str], new: Sequence[str]) -> int:
    """How many leading lines ``old`` and ``new`` share."""
    count = 0
    for old_line, new_line in zip(old, new, strict=False):
        if old_line != new_line:
            break
        count += 1
    return count


def command_reach(view: TerminalCallView | TerminalResultView) -> str | None:
    """What a command can reach, in the words every surface shows (terminal, ACP):
    ``"not sandboxed"`` or ``"sandboxed, network on|off"``; ``None`` when the card does
    not say."""
    if view.sandboxed is None:
        return None
    if not view.sandboxed:
        return "not sandboxed"
    return "sandboxed, network " + ("on" if view.network else "off")


def fallback_call_view(name: str, arguments: object) -> GenericCallView:
    """The card shown when a tool has no presenter (or it returned nothing or failed)."""
    return GenericCallView(name, raw_input=arguments)
