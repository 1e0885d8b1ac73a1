"""What the inbox page holds for a person and for a script reading it: each ticket's
card under its own id, with ``data-`` attributes naming the ticket, tool and state, who
asked in words, and a feedback field that says what feedback does."""

from __future__ import annotations

import html.parser

from dsh_tools._json import snapshot
from dsh_tools.approvals import ApprovalKey, ApprovalTicket
from dsh_tools.cli._inbox_page import fragment


class _Articles(html.parser.HTMLParser):
    """Each ``<article>``'s attributes, and the text of each ``<dt>``/``<dd>`` pair and
    each input's placeholder, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.articles: list[dict[str, str | None]] = []
        self.rows: list[str] = []
        self.placeholders: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "article":
            self.articles.append(dict(attrs))
        elif tag in ("dt", "dd"):
            self.rows.append("")
        elif tag == "input" and dict(attrs).get("name") == "feedback":
            self.placeholders.append(dict(attrs).get("placeholder"))

    def handle_data(self, data: str) -> None:
        if self.rows and self.lasttag in ("dt", "dd"):
            self.rows[-1] += data


def _ticket() -> ApprovalTicket:
    arguments = snapshot({"path": "notes.txt"})
    return ApprovalTicket.new(
        ApprovalKey.for_call("agent-1", "write_file", arguments),
        "call-1",
        arguments,
        created_at=0.0,
        expires_at=60.0,
        reason="tools that change files ask",
        asked_by=snapshot(
            {"plugin": "default_permissions", "rule": "writes", "file": "r.toml", "line": 3}
        ),
    )


def test_a_ticket_card_is_readable_by_a_person_and_a_script() -> None:
    ticket = _ticket()
    page = _Articles()
    page.feed(fragment([ticket]))

    [article] = page.articles
    assert ticket.id.startswith("t-")
    assert article["id"] == ticket.id  # not "t-t-..."
    assert (article["data-ticket"], article["data-tool"], article["data-state"]) == (
        ticket.id,
        "write_file",
        "pending",
    )
    rows = dict(zip(page.rows[::2], page.rows[1::2], strict=True))
    assert rows["asked by"] == "default_permissions: writes (r.toml:3)"
    assert page.placeholders == ["feedback (optional; a rejection tells the model)"]
