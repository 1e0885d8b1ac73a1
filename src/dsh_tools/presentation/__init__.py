"""Cards: how a tool's call and result are shown, and the code that shows them.

The cards themselves (:data:`ToolCallView`, :data:`ToolResultView` and their JSON form, whose
wire rules :mod:`dsh_tools.presentation._cards` describes); :func:`present_call` and
:func:`present_result`, which run a tool's presenters for one call and never raise; and
:func:`render_call_view`, :func:`render_result` and :func:`emit_card`, a card as plain
terminal text.
"""

from ._cards import (
    DIFF_MATCH_LINES,
    CardError,
    ContentBlocks,
    DiffCallView,
    DiffResultView,
    FileDiff,
    FileLocation,
    GenericCallView,
    GenericResultView,
    ReadFileLine,
    ReadResultView,
    SearchFileMatches,
    SearchMatch,
    SearchMatchesView,
    SearchPathsView,
    TerminalCallView,
    TerminalResultView,
    ToolCallKind,
    ToolCallView,
    ToolResultView,
    WebFetchView,
    WebSearchView,
    WebSource,
    command_reach,
    fallback_call_view,
    file_diffs,
    structure_call_view,
    structure_result_view,
    unstructure_view,
)
from ._presenting import (
    present_call,
    present_result,
    presentable_result,
)
from ._terminal import (
    emit_card,
    render_call_view,
    render_result,
)

__all__ = [
    "CardError",
    "ContentBlocks",
    "DIFF_MATCH_LINES",
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
    "emit_card",
    "fallback_call_view",
    "file_diffs",
    "present_call",
    "present_result",
    "presentable_result",
    "render_call_view",
    "render_result",
    "structure_call_view",
    "structure_result_view",
    "unstructure_view",
]
