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

from dsh_tools.approvals import (
    ApprovalKey,
    ApprovalTicket,
    MemoryApprovalStore,
    TicketAnswer,
    TicketState,
)
from dsh_tools.cli._inbox import InboxSecrets, serve_inbox
from dsh_tools.json import snapshot
from dsh_tools.models import ApprovalOutcome
from dsh_tools.presentation import DiffCallView, TerminalCallView, file_diffs, unstructure_view

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


def _ticket(store: MemoryApprovalStore, command: str, **card: Any) -> str:
    """Open a pending ticket for a ``run_command`` call; returns its id."""
    arguments = snapshot({"command": command})
    view = TerminalCallView(command, sandboxed=True, network=False)
    ticket = ApprovalTicket.new(
        ApprovalKey.for_call("agent-1", "run_command", arguments),
        f"call-{len(store.list_tickets())}",
        arguments,
        created_at=time.time(),
        expires_at=time.time() + 600,
        card=snapshot(card or unstructure_view(view)),
        asked_by=snapshot(
            {"plugin": "default_permissions", "rule": "ask", "file": "rules.toml", "line": 4}
        ),
    )
    return store.open_ticket(ticket).id


def _answers(store: MemoryApprovalStore) -> list[TicketAnswer]:
    return [t.answer for t in store.list_tickets() if t.answer is not None]


@pytest.fixture
def inbox() -> Iterator[tuple[MemoryApprovalStore, str]]:
    """A running inbox over a few pending tickets; yields them and the URL to open."""
    store = MemoryApprovalStore()
    diff = DiffCallView("Write notes.txt", file_diffs("notes.txt", "old line\n", "new line\n"))
    _ticket(store, "write notes.txt", **unstructure_view(diff))
    _ticket(store, "echo hello > w2.txt")
    with start_blocking_portal() as portal:
        future, url = portal.start_task(functools.partial(serve_inbox, store, port=0))
        try:
            yield store, url
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

    ticket_id = card.get_attribute("data-ticket")
    card.get_by_role("button", name="Approve once").click()
    page.wait_for_selector(f"text=Ticket {ticket_id}: allowed-once.")
    assert page.locator("article", has_text="echo hello").count() == 0
    answered = tickets.get_ticket(ticket_id)
    assert answered.state is TicketState.ANSWERED
    assert answered.answer.outcome is ApprovalOutcome.ALLOWED_ONCE
    assert (answered.answer.channel, answered.answer.feedback) == ("inbox", None)
    assert answered.answer.by.startswith("web")


def test_the_page_follows_tickets_as_they_arrive_and_are_answered(browser: Any, inbox: Any) -> None:
    tickets, url = inbox
    page = browser.new_page()
    page.goto(url)
    page.locator("article", has_text="notes.txt").locator("input[name=feedback]").fill("typing")
    _ticket(tickets, "make deploy")
    echo = next(t for t in tickets.list_tickets() if t.arguments["command"].startswith("echo"))
    tickets.answer_ticket(echo.id, TicketAnswer("rejected", "alice", "cli"))  # elsewhere
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
    page.wait_for_selector("text=: rejected.")
    [answer] = _answers(tickets)
    assert (answer.outcome, answer.feedback) == (
        ApprovalOutcome.REJECTED,
        "write it to docs/ instead",
    )


def test_an_always_approval_may_end(browser: Any, inbox: Any) -> None:
    tickets, url = inbox
    page = browser.new_page()
    page.goto(url)
    card = page.locator("article", has_text="echo hello")
    card.locator("select[name=lasts]").select_option(label="for 1 hour")
    card.get_by_role("button", name="Approve always").click()
    page.wait_for_selector("text=: allowed-always.")
    [answer] = _answers(tickets)
    assert (answer.outcome, answer.expires_in_s, answer.uses) == (
        ApprovalOutcome.ALLOWED_ALWAYS,
        3600.0,
        None,
    )
    card = page.locator("article", has_text="notes.txt")
    card.locator("select[name=lasts]").select_option(label="for 10 more calls")
    card.get_by_role("button", name="Approve always").click()
    page.wait_for_selector("text=: allowed-always.")
    assert {(a.expires_in_s, a.uses) for a in _answers(tickets)} == {(3600.0, None), (None, 10)}


def test_without_the_token_the_inbox_answers_401(browser: Any, inbox: Any) -> None:
    tickets, url = inbox
    base = url.split("?")[0]
    page = browser.new_page()
    assert page.goto(base).status == 401
    assert page.goto(base + "?token=wrong").status == 401
    assert "echo hello" not in page.content()
    some = tickets.list_tickets()[0].id
    posted = page.request.post(base + f"tickets/{some}", form={"outcome": "allowed-once"})
    assert posted.status == 401
    assert _answers(tickets) == []


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
    target = page.locator("article", has_text="echo hello").get_attribute("data-ticket")
    attacker = _attacker_site(url.split("?")[0] + f"tickets/{target}", csrf)
    try:
        with page.expect_response(lambda response: f"/tickets/{target}" in response.url) as posted:
            page.goto(f"http://127.0.0.1:{attacker.server_address[1]}/")
        assert posted.value.status == 403
    finally:
        attacker.shutdown()
        attacker.server_close()
    assert _answers(tickets) == []
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
    assert _answers(tickets) == []


def test_text_from_the_model_is_shown_inert(browser: Any) -> None:
    hostile = "echo <img src=x onerror=alert(1)>\x1b]0;owned\x07\u202eexe.txt"
    store = MemoryApprovalStore()
    _ticket(store, hostile)
    with start_blocking_portal() as portal:
        serve = functools.partial(serve_inbox, store, port=0, secrets_=InboxSecrets("tok-en"))
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


def test_the_inbox_approves_a_pending_call_end_to_end(browser: Any) -> None:
    """A call asks; nobody can answer now, so it ends APPROVAL_PENDING with a ticket; a
    person approves it in the inbox; resuming the ticket runs the body exactly once."""
    from approval_helpers import add_write_tool
    from dsh_tools import ToolRegistry
    from dsh_tools.errors import ErrorCode
    from dsh_tools.hookspecs import hookimpl
    from dsh_tools.models import Ask, ToolExecution, ToolExecutionInput

    store = MemoryApprovalStore()
    registry = ToolRegistry(approval=lambda request: "pending", approval_store=store)
    runs = add_write_tool(registry)

    class AskFirst:
        @hookimpl
        def dsh_tools_pre_execute(self, execution: ToolExecution) -> Ask:
            return Ask("deploys to production")

    registry.add_plugin(AskFirst())
    agent = registry.scope("agent-1")
    call = ToolExecutionInput("call-1", "write", {"path": "billing.txt"})

    async def resume(ticket: str) -> Any:
        return await agent.resume(ticket)

    # Playwright's sync API keeps an event loop in this thread: the calls run on the
    # portal's, as a host's would.
    with start_blocking_portal() as portal:
        pending = portal.call(agent.execute, call)
        assert pending.code == ErrorCode.APPROVAL_PENDING
        ticket_id = pending.meta["approval"]["ticket"]
        future, url = portal.start_task(functools.partial(serve_inbox, store, port=0))
        try:
            page = browser.new_page()
            page.goto(url)
            card = page.locator(f"article[data-ticket='{ticket_id}']")
            assert "deploys to production" in card.inner_text()
            card.get_by_role("button", name="Approve once").click()
            page.wait_for_selector(f"text=Ticket {ticket_id}: allowed-once.")
        finally:
            future.cancel()
        assert runs == []
        resumed = portal.call(resume, ticket_id)
        assert not resumed.is_error
        assert runs == ["billing.txt"]
        again = portal.call(resume, ticket_id)
    assert again.is_error  # already resumed: the body does not run twice
    assert runs == ["billing.txt"]


def test_a_store_that_fails_is_reported_and_nothing_is_answered(browser: Any) -> None:
    class Broken(MemoryApprovalStore):
        def list_tickets(self, **filters: Any) -> Any:
            raise OSError("disk is gone")

    with start_blocking_portal() as portal:
        future, url = portal.start_task(functools.partial(serve_inbox, Broken(), port=0))
        try:
            page = browser.new_page()
            response = page.goto(url)
            assert response.status == 503
            assert "disk is gone" in page.content()
        finally:
            future.cancel()


def test_a_page_elsewhere_cannot_reach_the_inbox_by_dns_rebinding() -> None:
    """On loopback only a loopback Host header is served, even with the right token."""
    import http.client
    from urllib.parse import urlsplit

    with start_blocking_portal() as portal:
        serve = functools.partial(serve_inbox, MemoryApprovalStore(), port=0)
        future, url = portal.start_task(serve)
        try:
            parts = urlsplit(url)
            statuses = []
            for host in (f"attacker.example:{parts.port}", parts.netloc):
                connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
                connection.putrequest("GET", f"/?{parts.query}", skip_host=True)
                connection.putheader("Host", host)
                connection.endheaders()
                statuses.append(connection.getresponse().status)
                connection.close()
        finally:
            future.cancel()
    assert statuses == [421, 303]
