"""The approval inbox's HTML: one server-rendered page and the fragment it polls.

Every string shown comes from a model, a workspace or a rules file, so each goes through
:func:`~dsh_tools._safetext.safe_text` (nothing in it can act on a reader) and then
:func:`html.escape` (nothing in it can act on the page). The card is the terminal's
rendering of the call (:func:`~dsh_tools.presentation.render_call_view`), so the inbox shows
a command, a diff or a path exactly as ``dsh-tools approvals show`` prints it.

:mod:`dsh_tools.cli._inbox` serves these pages.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from .._models import ApprovalOutcome
from .._safetext import safe_text
from ..approvals import ApprovalTicket
from ..approvals._text import ticket_card, ticket_fields
from ..presentation._cards import DiffCallView, ToolCallView
from ..presentation._terminal import render_call_view

__all__ = ["LASTS", "fragment", "page"]

LASTS: dict[str, tuple[str, float | None, int | None]] = {
    "": ("until forgotten", None, None),
    "1h": ("for 1 hour", 3600.0, None),
    "1d": ("for 1 day", 86400.0, None),
    "1": ("for 1 more call", None, 1),
    "10": ("for 10 more calls", None, 10),
}
"""How long an *Approve always* lasts, by the value the page sends: its label, then the
grant's ``expires_in_s`` and ``uses``."""


_STYLE = """
body{font:15px/1.4 system-ui,sans-serif;margin:0 auto;max-width:60rem;padding:1rem;color:#222}
h1{font-size:1.3rem}article{border:1px solid #bbb;border-radius:6px;margin:1rem 0;padding:.8rem}
pre{background:#f6f6f6;overflow-x:auto;padding:.5rem;white-space:pre-wrap;word-break:break-all}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.1rem .8rem;margin:.5rem 0}
dt{color:#666}dd{margin:0;word-break:break-all}.add{color:#064}.del{color:#900}
.notice{padding:.5rem;border-radius:4px}.ok{background:#e6f4ea}.bad{background:#fdecea}
form{display:flex;flex-wrap:wrap;gap:.5rem;align-items:center}
input[name=feedback]{flex:1;min-width:12rem}
"""

_SCRIPT = """
const list = document.getElementById("tickets");
const notice = document.getElementById("notice");
const KEY = "dsh-inbox-token";
const given = new URLSearchParams(location.hash.slice(1)).get("token");
if (given !== null) {
  sessionStorage.setItem(KEY, given);
  history.replaceState(null, "", location.pathname + location.search);
}
const token = sessionStorage.getItem(KEY);
let etag = "";
function say(text, ok) {
  notice.textContent = text;
  notice.className = "notice " + (ok ? "ok" : "bad");
  notice.hidden = false;
}
function ask(path, options) {
  const headers = Object.assign({"Authorization": "Bearer " + token}, options.headers);
  return fetch(path, Object.assign({}, options,
    {headers: headers, cache: "no-store", credentials: "omit"}));
}
function merge(text) {
  const holder = document.createElement("template");
  holder.innerHTML = text;
  const fresh = holder.content.getElementById("tickets");
  const incoming = new Map(
    Array.from(fresh.querySelectorAll("article")).map((card) => [card.id, card]));
  for (const card of Array.from(list.querySelectorAll("article"))) {
    if (!incoming.has(card.id)) card.remove();
  }
  let previous = null;
  for (const [id, card] of incoming) {
    let current = document.getElementById(id);
    if (current === null) {
      current = document.importNode(card, true);
      if (previous === null) list.prepend(current); else previous.after(current);
    }
    previous = current;
  }
  document.getElementById("empty").hidden = incoming.size > 0;
  document.title = fresh.dataset.title;
}
async function refresh() {
  const answer = await ask("tickets", {headers: {"If-None-Match": etag}});
  if (answer.status === 200) {
    etag = answer.headers.get("ETag");
    merge(await answer.text());
  } else if (answer.status !== 304) {
    say(await answer.text(), false);
  }
}
async function poll() {
  try { await refresh(); } catch (error) {}
  setTimeout(poll, 1000);
}
list.addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target;
  const body = new URLSearchParams(new FormData(form));
  if (event.submitter) body.append(event.submitter.name, event.submitter.value);
  const answer = await ask(form.getAttribute("action"), {method: "POST", body: body});
  const said = await answer.text();
  await refresh();
  say(said, answer.ok);
});
if (token === null) {
  say("a token is required: open the URL the inbox printed when it started", false);
} else {
  poll();
}
"""


def _text(value: str, *, multiline: bool = False) -> str:
    """``value`` safe to show and to place in HTML (text or a quoted attribute)."""
    return html.escape(safe_text(value, multiline=multiline), quote=True)


_DIFF_KINDS = {"+": "add", "-": "del"}


def _card(view: ToolCallView) -> str:
    """The call's card as preformatted text; a diff's added and removed lines coloured."""
    lines = render_call_view(view).splitlines()
    if not isinstance(view, DiffCallView):
        return f"<pre>{_text(chr(10).join(lines), multiline=True)}</pre>"
    shown = []
    for line in lines:
        body = line[2:] if line.startswith("  ") else ""
        marked = not body.startswith(("+++", "---"))
        kind = (
            "add"
            if marked and body.startswith("+")
            else "del"
            if marked and body[:1] == "-"
            else ""
        )
        escaped = _text(line, multiline=True)
        shown.append(f'<span class="{kind}">{escaped}</span>' if kind else escaped)
    return "<pre>" + "\n".join(shown) + "</pre>"


def _record(ticket: ApprovalTicket) -> str:
    rows = ticket_fields(ticket)
    cells = "".join(f"<dt>{_text(name)}</dt><dd>{_text(value)}</dd>" for name, value in rows)
    return f"<dl>{cells}</dl>"


def _answer_form(ticket: ApprovalTicket) -> str:
    action = f"tickets/{_text(ticket.id)}"
    buttons = (
        (ApprovalOutcome.ALLOWED_ONCE, "Approve once"),
        (ApprovalOutcome.ALLOWED_ALWAYS, "Approve always"),
        (ApprovalOutcome.REJECTED, "Reject"),
    )
    shown = "".join(
        f'<button name="outcome" value="{outcome.value}">{label}</button>'
        for outcome, label in buttons
    )
    lasts = "".join(
        f'<option value="{value}">{label}</option>' for value, (label, *_) in LASTS.items()
    )
    return (
        f'<form method="post" action="{action}">'
        f"{shown}"
        f'<select name="lasts" aria-label="approve always lasts">{lasts}</select>'
        '<input name="feedback" placeholder="feedback (optional; a rejection tells the model)" '
        'maxlength="2000" aria-label="feedback"></form>'
    )


def _article(ticket: ApprovalTicket) -> str:
    return (
        f'<article id="{_text(ticket.id)}" data-ticket="{_text(ticket.id)}" '
        f'data-tool="{_text(ticket.tool_name)}" data-state="{_text(ticket.state.value)}">'
        f"<h2>{_text(ticket.tool_name)} <small>{_text(ticket.id)}</small></h2>"
        f"{_card(ticket_card(ticket))}{_record(ticket)}{_answer_form(ticket)}</article>"
    )


def _title(tickets: Sequence[ApprovalTicket]) -> str:
    return f"({len(tickets)}) approvals" if tickets else "approvals"


def fragment(tickets: Sequence[ApprovalTicket]) -> str:
    """The list of pending tickets, as the page's script fetches it."""
    cards = "".join(_article(ticket) for ticket in tickets)
    return (
        f'<div id="tickets" data-title="{_title(tickets)}">{cards}</div>'
        f'<p id="empty"{" hidden" if tickets else ""}>No call awaits approval.</p>'
    )


def page(nonce: str) -> str:
    """The inbox page, empty until its script (``nonce`` lets it and the page's style
    run) has fetched the tickets with the token from the URL's fragment."""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>approvals</title><style nonce="{nonce}">{_STYLE}</style></head>'
        "<body><h1>Calls awaiting approval</h1>"
        '<p id="notice" class="notice" role="status" hidden></p>'
        '<div id="tickets"></div><p id="empty" hidden>No call awaits approval.</p>'
        f'<script nonce="{nonce}">{_SCRIPT}</script></body></html>'
    )
