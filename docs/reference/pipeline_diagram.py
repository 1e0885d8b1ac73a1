"""MkDocs build hook (``hooks:`` in mkdocs.yml): the pipeline page's flowchart, drawn at
build time as inline SVG.

The page used a Mermaid block, which Material turns into a picture in the reader's browser
with a script fetched from a CDN: offline, or with scripts blocked, readers saw the raw
``flowchart TD`` text. Here the diagram is plain SVG written into the page, so it needs
no script and no network. It is inline rather than an image file so that it takes the
theme's colours (Material's CSS variables) in light and dark mode.

The layout is fixed by hand below: nodes on a grid of centres, edges as right-angled
polylines through named lanes. docs/pipeline.md keeps the marker line
``<!-- pipeline-diagram -->`` where the figure goes; ``python
docs/reference/pipeline_diagram.py out.svg`` writes the SVG alone, to look at it.
"""

from __future__ import annotations

import sys
from html import escape
from pathlib import Path
from typing import Any, NamedTuple

MARKER = "<!-- pipeline-diagram -->"
PAGE = "pipeline.md"

WIDTH, HEIGHT = 760, 910
MAIN, SIDE = 300, 590  # x of the main column's and the side column's centres
NO_LANE, RAISES_LANE, DENY_LANE = 22, 52, 738  # x of the long vertical routes
LINE_HEIGHT = 15


class Node(NamedTuple):
    cx: int
    cy: int
    width: int
    height: int
    shape: str  # "box", "pill" or "diamond"
    lines: tuple[str, ...]

    @property
    def top(self) -> tuple[int, int]:
        return self.cx, self.cy - self.height // 2

    @property
    def bottom(self) -> tuple[int, int]:
        return self.cx, self.cy + self.height // 2

    def left(self, dy: int = 0) -> tuple[int, int]:
        return self.cx - self.width // 2, self.cy + dy

    def right(self, dy: int = 0) -> tuple[int, int]:
        return self.cx + self.width // 2, self.cy + dy


class Edge(NamedTuple):
    points: tuple[tuple[int, int], ...]
    label: tuple[str, ...] = ()
    label_at: tuple[int, int] = (0, 0)
    anchor: str = "middle"
    dashed: bool = False
    arrow: bool = True  # False: the edge joins another one, which carries the arrow


def _node(cx: int, cy: int, *lines: str, width: int = 240, shape: str = "box") -> Node:
    """A node tall enough for its lines (a diamond gets room for its corners)."""
    height = len(lines) * LINE_HEIGHT + 17
    if shape == "diamond":
        height += 28
    return Node(cx, cy, width, height, shape, lines)


START = _node(MAIN, 28, "registry.execute(call)", width=210, shape="pill")
ARGS = _node(MAIN, 105, "arguments are", "lossless JSON?", width=210, shape="diamond")
PRE = _node(MAIN, 205, "1. pre-execute", "dsh_tools_pre_execute", "first Allow / Deny / Ask wins")
APPROVAL = _node(SIDE, 290, "approval store, service", "only allowed-* allows", width=230)
ALLOWED = _node(MAIN, 345, "allowed?", width=130, shape="diamond")
GUARDS = _node(MAIN, 440, "2. guards", "dsh_tools_guard + registry.guard()", "any reason denies")
EXECUTE = _node(MAIN, 535, "3. execute", "dsh_tools_execute wrappers", "around the body")
BODY = _node(
    SIDE, 535, "the body:", "resolve the tool, validate", "arguments, run, render", width=230
)
POST = _node(MAIN, 630, "4. post-execute", "dsh_tools_post_execute", "Accept / Block, a fold")
FINALIZE = _node(MAIN, 715, "finalize_content", "(the tool's, once)")
RESULT = _node(MAIN, 800, "5. result observers", "dsh_tools_result", "exactly once")
END = _node(MAIN, 880, "frozen result", width=210, shape="pill")
NODES = (START, ARGS, PRE, APPROVAL, ALLOWED, GUARDS, EXECUTE, BODY, POST, FINALIZE, RESULT, END)

JOIN_Y = 290  # where the approval's answer joins the line into "allowed?"


def _down(upper: Node, lower: Node, *label: str, at: int = 0) -> Edge:
    """A straight edge from ``upper``'s bottom to ``lower``'s top, labelled on its right."""
    return Edge((upper.bottom, lower.top), label, (MAIN + 8, at), "start")


EDGES = (
    _down(START, ARGS),
    _down(ARGS, PRE, "yes", at=162),
    Edge((PRE.bottom, (MAIN, JOIN_Y))),
    Edge(((MAIN, JOIN_Y), ALLOWED.top), ("Allow, or", "nobody decided"), (MAIN - 8, 262), "end"),
    Edge((PRE.right(), (SIDE, PRE.cy), APPROVAL.top), ("Ask",), (470, PRE.cy - 6)),
    Edge((APPROVAL.left(), (MAIN, JOIN_Y)), arrow=False),
    _down(ALLOWED, GUARDS, "yes", at=395),
    _down(GUARDS, EXECUTE, "no reason", at=490),
    Edge((EXECUTE.right(-8), BODY.left(-8))),
    Edge((BODY.left(8), EXECUTE.right(8))),
    _down(EXECUTE, POST),
    _down(POST, FINALIZE),
    _down(FINALIZE, RESULT),
    _down(RESULT, END),
    # Denials take the post path: post-execute still sees them.
    Edge(
        (ALLOWED.right(), (DENY_LANE, ALLOWED.cy), (DENY_LANE, POST.cy), POST.right()),
        ("Deny",),
        (ALLOWED.right()[0] + 12, ALLOWED.cy - 8),
        "start",
    ),
    Edge(
        (GUARDS.right(), (DENY_LANE, GUARDS.cy)),
        ("a reason",),
        (GUARDS.right()[0] + 12, GUARDS.cy - 8),
        "start",
        arrow=False,
    ),
    # Arguments that are not JSON, and failing policy, take the final path.
    Edge(
        (ARGS.left(), (NO_LANE, ARGS.cy), (NO_LANE, FINALIZE.cy + 8), FINALIZE.left(8)),
        ("no",),
        (140, ARGS.cy - 6),
    ),
    Edge(
        (PRE.left(), (RAISES_LANE, PRE.cy), (RAISES_LANE, FINALIZE.cy - 8), FINALIZE.left(-8)),
        ("raises /", "bad value"),
        (116, PRE.cy - 20),
        dashed=True,
    ),
    Edge(
        (GUARDS.left(), (RAISES_LANE, GUARDS.cy)),
        ("raises /", "bad value"),
        (116, GUARDS.cy - 20),
        dashed=True,
        arrow=False,
    ),
    Edge(
        (EXECUTE.left(), (RAISES_LANE, EXECUTE.cy)),
        ("wrapper", "raises"),
        (116, EXECUTE.cy - 20),
        dashed=True,
        arrow=False,
    ),
)

_STYLE = """
.dsh-diagram { display: block; max-width: 100%; height: auto; margin: 1em auto; }
.dsh-diagram .node { fill: var(--md-code-bg-color, #f5f5f5);
  stroke: var(--md-default-fg-color--light, #666); stroke-width: 1.2; }
.dsh-diagram .edge { fill: none; stroke: var(--md-default-fg-color--light, #666);
  stroke-width: 1.3; }
.dsh-diagram .dashed { stroke-dasharray: 5 4; }
.dsh-diagram .head { fill: var(--md-default-fg-color--light, #666); }
.dsh-diagram text { fill: var(--md-default-fg-color, #222); font-size: 12.5px;
  font-family: var(--md-text-font-family, sans-serif); }
.dsh-diagram .title { font-weight: bold; }
.dsh-diagram .code { font-family: var(--md-code-font-family, monospace); font-size: 11.5px; }
.dsh-diagram .label { font-size: 11px; fill: var(--md-default-fg-color--light, #555); }
"""


def _shape(node: Node) -> str:
    x, y = node.cx - node.width // 2, node.cy - node.height // 2
    if node.shape == "diamond":
        points = [node.top, node.right(), node.bottom, node.left()]
        return f'<polygon class="node" points="{_points(points)}"/>'
    radius = node.height // 2 if node.shape == "pill" else 6
    return (
        f'<rect class="node" x="{x}" y="{y}" width="{node.width}" height="{node.height}" '
        f'rx="{radius}"/>'
    )


def _line_class(node: Node, index: int) -> str:
    """Hook and API names in code type; a numbered stage's first line in bold."""
    line = node.lines[index]
    if "dsh_tools_" in line or "registry." in line or "_content" in line:
        return "code"
    if index == 0 and len(node.lines) > 1 and line[:1].isdigit():
        return "title"
    return ""


def _text(lines: tuple[str, ...], x: int, y: int, anchor: str, classes: list[str]) -> str:
    """Lines of text whose block is vertically centred on ``y``."""
    top = y - (len(lines) - 1) * LINE_HEIGHT / 2
    return "".join(
        f'<text x="{x}" y="{top + index * LINE_HEIGHT:g}" text-anchor="{anchor}" '
        'dominant-baseline="central"'
        + (f' class="{kind}"' if kind else "")
        + f">{escape(line)}</text>"
        for index, (line, kind) in enumerate(zip(lines, classes, strict=True))
    )


def _draw_node(node: Node) -> str:
    classes = [_line_class(node, index) for index in range(len(node.lines))]
    return _shape(node) + _text(node.lines, node.cx, node.cy, "middle", classes)


def _points(points: Any) -> str:
    return " ".join(f"{x},{y}" for x, y in points)


def _edge(edge: Edge) -> str:
    classes = "edge dashed" if edge.dashed else "edge"
    marker = ' marker-end="url(#dsh-arrow)"' if edge.arrow else ""
    line = f'<polyline class="{classes}" points="{_points(edge.points)}"{marker}/>'
    if not edge.label:
        return line
    return line + _text(edge.label, *edge.label_at, edge.anchor, ["label"] * len(edge.label))


def render() -> str:
    """The diagram as one ``<svg>`` element on a single line (a raw HTML block in Markdown
    ends at the first blank line)."""
    parts = [
        f'<svg class="dsh-diagram" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" aria-labelledby="dsh-pipeline-title">',
        '<title id="dsh-pipeline-title">The five stages of one call, and the paths around '
        "them</title>",
        "<style>" + " ".join(_STYLE.split()) + "</style>",
        '<defs><marker id="dsh-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path class="head" d="M0,0 L10,5 L0,10 z"/>'
        "</marker></defs>",
        *(_edge(edge) for edge in EDGES),
        *(_draw_node(node) for node in NODES),
        "</svg>",
    ]
    return "".join(parts)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Replace the marker on the pipeline page with the diagram."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lost its {MARKER} line; the pipeline diagram has nowhere to go")
    return markdown.replace(MARKER, f'<div class="dsh-figure">{render()}</div>')


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(render() + "\n", encoding="utf-8")
