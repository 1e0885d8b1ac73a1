"""The approval inbox in a real browser: headless Chromium from the system's packages,
driven by Playwright (its own browser download is never used)."""

from __future__ import annotations

import functools
import http.server
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from anyio.from_thread import start_blocking_portal

from dsh_tools._inbox import InboxSecrets, serve_inbox
from dsh_tools._inbox_page import InboxTicket
from dsh_tools.models import ApprovalOutcome
from dsh_tools.presentation import DiffCallView, TerminalCallView, file_diffs

CHROMIUM = "/usr/lib/chromium/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _unavailable(reason: str) -> None:
    """Under CI the browser tests must run: a missing browser fails them there."""
    if os.environ.get("CI"):
        pytest.fail(f"the inbox's browser tests cannot run under CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (it is in the test extra)")
    if not os.path.exists(CHROMIUM):
        _unavailable(f"no Chromium at {CHROMIUM} (Debian's chromium package)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        launched.close()


class Tickets:
    """A store of pending tickets the inbox reads and answers (as a ticket store would)."""

    def __init__(self, *tickets: InboxTicket) -> None:
        self.open = list(tickets)
        self.answers: list[tuple[str, ApprovalOutcome, str | None, str]] = []
        self.lock = threading.Lock()

    def pending(self) -> list[InboxTicket]:
        with self.lock:
            return list(self.open)

    def answer(
        self, ticket_id: str, outcome: ApprovalOutcome, feedback: str | None, who: str
    ) -> bool:
        with self.lock:
            for ticket in self.open:
                if ticket.id == ticket_id:
                    self.open.remove(ticket)
                    self.answers.append((ticket_id, outcome, feedback, who))
                    return True
        raise LookupError(ticket_id)


def _ticket(ticket_id: str, command: str) -> InboxTicket:
    return InboxTicket(
        ticket_id,
        "agent-1",
        "run_command",
        f"call-{ticket_id}",
        TerminalCallView(command, sandboxed=True, network=False),
        "default_permissions: ask run_command (rules.toml:4)",
        None,
        time.time(),
        None,
    )


@pytest.fixture
def inbox() -> Iterator[tuple[Tickets, str]]:
    """A running inbox over a few pending tickets; yields them and the URL to open."""
    diff = DiffCallView("Write notes.txt", file_diffs("notes.txt", "old line\n", "new line\n"))
    written = InboxTicket(
        "t-write", "agent-1", "write_file", "call-1", diff, None, None, time.time(), None
    )
    tickets = Tickets(written, _ticket("t-echo", "echo hello > w2.txt"))
    with start_blocking_portal() as portal:
        future, url = portal.start_task(functools.partial(serve_inbox, tickets, port=0))
        try:
            yield tickets, url
        finally:
            future.cancel()


def test_a_person_approves_a_pending_call_in_the_browser(browser: Any, inbox: Any) -> None:
    tickets, url = inbox
    page = browser.new_page()
    page.goto(url)
    card = page.locator("article", has_text="echo hello > w2.txt")
    assert "sandboxed, network off" in card.inner_text()
    assert "rules.toml:4" in card.inner_text()
    assert "+new line" in page.locator("article", has_text="notes.txt").inner_text()
    assert "?token=" not in page.url  # the token moved to a cookie

    card.get_by_role("button", name="Approve once").click()
    page.wait_for_selector("text=Ticket t-echo: allowed-once.")
    assert page.locator("article", has_text="echo hello").count() == 0
    [(ticket_id, outcome, feedback, who)] = tickets.answers
    assert (ticket_id, outcome, feedback) == ("t-echo", ApprovalOutcome.ALLOWED_ONCE, None)
    assert who.startswith("web")


def test_the_page_follows_tickets_as_they_arrive_and_are_answered(browser: Any, inbox: Any) -> None:
    tickets, url = inbox
    page = browser.new_page()
    page.goto(url)
    page.locator("article", has_text="notes.txt").locator("input[name=feedback]").fill("typing")
    with tickets.lock:
        tickets.open.append(_ticket("t-late", "make deploy"))
        tickets.open.pop(1)  # answered elsewhere
    page.wait_for_selector("article:has-text('make deploy')", timeout=10_000)
    page.wait_for_selector("article:has-text('echo hello')", state="detached", timeout=10_000)
    assert page.title() == "(2) approvals"
    typed = page.locator("article", has_text="notes.txt").locator("input[name=feedback]")
    assert typed.input_value() == "typing"  # a card already shown is left alone


def test_a_rejection_carries_the_persons_feedback(browser: Any, inbox: Any) -> None:
    tickets, url = inbox
    page = browser.new_page()
    page.goto(url)
    card = page.locator("article", has_text="notes.txt")
    card.locator("input[name=feedback]").fill("write it to docs/ instead")
    card.get_by_role("button", name="Reject").click()
    page.wait_for_selector("text=Ticket t-write: rejected.")
    assert tickets.answers[0][1:3] == (ApprovalOutcome.REJECTED, "write it to docs/ instead")


def test_without_the_token_the_inbox_answers_401(browser: Any, inbox: Any) -> None:
    tickets, url = inbox
    base = url.split("?")[0]
    page = browser.new_page()
    assert page.goto(base).status == 401
    assert page.goto(base + "?token=wrong").status == 401
    assert "echo hello" not in page.content()
    assert (
        page.request.post(base + "tickets/t-echo", form={"outcome": "allowed-once"}).status == 401
    )
    assert tickets.answers == []


def _attacker_site(target: str, csrf: str) -> http.server.ThreadingHTTPServer:
    """Another origin on this machine (same site, other port) whose page posts an answer
    to the inbox, a valid CSRF token included."""
    form = (
        f'<form id="f" method="post" action="{target}">'
        f'<input name="csrf" value="{csrf}"><input name="outcome" value="allowed-always">'
        '</form><script>document.getElementById("f").submit()</script>'
    ).encode()

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(form)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_cross_site_post_is_refused(browser: Any, inbox: Any) -> None:
    tickets, url = inbox
    context = browser.new_context()
    page = context.new_page()
    page.goto(url)  # the person's browser holds the inbox's cookie
    csrf = page.locator("#tickets").get_attribute("data-csrf")
    attacker = _attacker_site(url.split("?")[0] + "tickets/t-echo", csrf)
    try:
        with page.expect_response(lambda response: "/tickets/t-echo" in response.url) as posted:
            page.goto(f"http://127.0.0.1:{attacker.server_address[1]}/")
        assert posted.value.status == 403
    finally:
        attacker.shutdown()
        attacker.server_close()
    assert tickets.answers == []
    page.goto(url.split("?")[0])
    assert page.locator("article", has_text="echo hello").count() == 1


def test_a_post_from_the_page_without_its_csrf_token_is_refused(browser: Any, inbox: Any) -> None:
    tickets, url = inbox
    page = browser.new_page()
    page.goto(url)
    page.evaluate("document.querySelectorAll('input[name=csrf]').forEach(i => i.value = 'x.y')")
    page.locator("article", has_text="echo hello").get_by_role(
        "button", name="Approve once"
    ).click()
    assert "cross-site request refused" in page.content()
    assert tickets.answers == []


def test_text_from_the_model_is_shown_inert(browser: Any) -> None:
    hostile = "echo <img src=x onerror=alert(1)>\x1b]0;owned\x07\u202eexe.txt"
    tickets = Tickets(_ticket("t-x", hostile))
    with start_blocking_portal() as portal:
        serve = functools.partial(serve_inbox, tickets, port=0, secrets_=InboxSecrets("tok-en"))
        future, url = portal.start_task(serve)
        try:
            page = browser.new_page()
            dialogs: list[str] = []
            page.on("dialog", lambda dialog: dialogs.append(dialog.message))
            page.goto(url)
            shown = page.locator("article").inner_text()
        finally:
            future.cancel()
    assert "<img src=x onerror=alert(1)>\\x1b]0;owned\\x07\\u202eexe.txt" in shown
    assert page.locator("article img").count() == 0
    assert dialogs == []
