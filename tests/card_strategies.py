"""Hypothesis strategies for every presentation card (valid cards only)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from dsh_tools.presentation import (
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
    WebFetchView,
    WebSearchView,
    WebSource,
)

texts = st.text(max_size=20)
maybe_texts = st.none() | texts
maybe_bools = st.none() | st.booleans()
positive = st.integers(min_value=1, max_value=10**6)

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=10,
)
content_blocks = st.lists(
    st.builds(
        lambda kind, extra: {**extra, "type": kind},
        texts,
        st.dictionaries(texts, json_values, max_size=2),
    ),
    max_size=3,
)

file_locations = st.builds(FileLocation, texts, st.none() | positive)
file_diffs = st.builds(FileDiff, texts, maybe_texts, texts)
read_lines = st.builds(ReadFileLine, positive, texts)
search_files = st.builds(
    SearchFileMatches, texts, st.lists(st.builds(SearchMatch, positive, texts), max_size=3)
)
web_sources = st.builds(
    WebSource, texts, title=maybe_texts, snippet=maybe_texts, published_at=maybe_texts
)

call_views = st.one_of(
    st.builds(
        GenericCallView,
        texts,
        kind=st.none() | st.sampled_from(ToolCallKind),
        raw_input=json_values,
        content=st.none() | content_blocks,
        locations=st.lists(file_locations, max_size=3),
    ),
    st.builds(
        TerminalCallView,
        texts,
        description=maybe_texts,
        cwd=maybe_texts,
        sandboxed=maybe_bools,
        network=maybe_bools,
    ),
    st.builds(
        DiffCallView,
        texts,
        st.lists(file_diffs, max_size=3),
        locations=st.lists(file_locations, max_size=3),
    ),
)


@st.composite
def _totals(draw: st.DrawFn, shown: int) -> tuple[bool, int]:
    """``truncated`` and a ``total`` that agrees with it (exact unless truncated)."""
    truncated = draw(st.booleans())
    extra = draw(st.integers(min_value=0, max_value=1000)) if truncated else 0
    return truncated, shown + extra


@st.composite
def _search_matches(draw: st.DrawFn) -> SearchMatchesView:
    files = draw(st.lists(search_files, max_size=3))
    truncated, total = draw(_totals(sum(len(entry.matches) for entry in files)))
    return SearchMatchesView(files, truncated=truncated, total=total, title=draw(maybe_texts))


@st.composite
def _search_paths(draw: st.DrawFn) -> SearchPathsView:
    paths = draw(st.lists(texts, max_size=3))
    truncated, total = draw(_totals(len(paths)))
    return SearchPathsView(paths, truncated=truncated, total=total, title=draw(maybe_texts))


@st.composite
def _terminal_results(draw: st.DrawFn) -> TerminalResultView:
    ending = draw(st.sampled_from(["exited", "killed", "unknown"]))
    return TerminalResultView(
        title=draw(maybe_texts),
        output=draw(maybe_texts),
        exit_code=draw(st.integers(-255, 255)) if ending == "exited" else None,
        signal=draw(texts) if ending == "killed" else None,
        sandboxed=draw(maybe_bools),
        network=draw(maybe_bools),
    )


result_views = st.one_of(
    st.builds(GenericResultView, title=maybe_texts, content=st.none() | content_blocks),
    _terminal_results(),
    st.builds(DiffResultView, title=maybe_texts, diffs=st.lists(file_diffs, max_size=3)),
    _search_matches(),
    _search_paths(),
    st.builds(
        ReadResultView,
        texts,
        offset=positive,
        lines=st.lists(read_lines, max_size=3),
        total_lines=st.integers(min_value=0, max_value=10**6),
        title=maybe_texts,
        lang=maybe_texts,
        content=maybe_texts,
    ),
    st.builds(
        WebSearchView,
        st.lists(web_sources, max_size=3),
        truncated=st.booleans(),
        answer=maybe_texts,
        title=maybe_texts,
    ),
    st.builds(
        WebFetchView,
        texts,
        status_code=st.integers(100, 599),
        truncated=st.booleans(),
        title=maybe_texts,
    ),
)
