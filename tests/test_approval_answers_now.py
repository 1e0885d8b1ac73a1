"""A person who can answer now is asked although an earlier run of the same call left its
ticket open: the answer closes that ticket, and the call runs once. A ticket that cannot
be found is said to be missing from the store that was read."""

from __future__ import annotations

from typing import Any

import pytest

from approval_helpers import code
from dsh_tools import (
    ApprovalRequest,
    Ask,
    MemoryApprovalStore,
    TicketAnswer,
    TicketState,
    ToolExecutionInput,
    ToolRegistry,
    define_tool,
    hookimpl,
)


class AskAlways:
    @hookimpl
    def dsh_tools_pre_execute(self, execution: Any) -> Ask:
        return Ask("deploys")


def deploying(registry: ToolRegistry) -> list[str]:
    """A ``deploy(service)`` tool that notes the services it deployed."""
    ran: list[str] = []

    def execute(args: dict[str, Any], ctx: Any) -> str:
        ran.append(args["service"])
        return "deployed"

    registry.register(
        define_tool(
            name="deploy",
            description="Deploy a service.",
            parameters={"service": {"type": "string", "required": True}},
            execute=execute,
        )
    )
    registry.add_plugin(AskAlways())
    return ran


CALL = ToolExecutionInput("c1", "deploy", {"service": "web"}, agent="coder")


def pending_ticket(store: MemoryApprovalStore) -> tuple[ToolRegistry, list[str], str]:
    registry = ToolRegistry(approval=lambda request: "pending", approval_store=store)
    ran = deploying(registry)
    result = registry.execute_sync(CALL)
    assert code(result) == "APPROVAL_PENDING"
    return registry, ran, result.meta["approval"]["ticket"]  # type: ignore[index]


class Elicits:
    """A service that can answer now (as an MCP client that elicits), and says so."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.asked: list[ApprovalRequest] = []

    def answers_now(self, request: ApprovalRequest) -> bool:
        return True

    def request(self, request: ApprovalRequest) -> str:
        self.asked.append(request)
        return self.answer


@pytest.mark.parametrize(("answer", "expected"), [("allowed-once", "ok"), ("rejected", "DENIED")])
def test_a_person_who_can_answer_now_is_asked_over_an_open_ticket_and_closes_it(
    answer: str, expected: str
) -> None:
    store = MemoryApprovalStore()
    _, ran, ticket = pending_ticket(store)  # an earlier run left the ticket open
    person = Elicits(answer)
    now = ToolRegistry(approval=person, approval_store=store)
    ran_now = deploying(now)
    assert code(now.execute_sync(CALL)) == expected
    assert len(person.asked) == 1
    assert ran + ran_now == (["web"] if expected == "ok" else [])
    closed = store.get_ticket(ticket)
    assert closed is not None
    assert closed.state is TicketState.RESUMED  # answered, and taken by this call: once
    assert closed.answer is not None
    assert closed.answer.outcome.value == answer
    # The earlier run, repeated, finds the ticket answered and resumed: nothing runs again.
    again = ToolRegistry(approval=lambda request: "pending", approval_store=store)
    ran_again = deploying(again)
    assert code(again.execute_sync(CALL)) == "APPROVAL_PENDING"  # a new ticket, unanswered
    assert ran_again == []


def test_a_service_that_cannot_answer_now_leaves_the_call_waiting_on_its_ticket() -> None:
    store = MemoryApprovalStore()
    _, _ran, ticket = pending_ticket(store)

    class Offline(Elicits):
        def answers_now(self, request: ApprovalRequest) -> bool:
            return False

    person = Offline("allowed-once")
    later = ToolRegistry(approval=person, approval_store=store)
    deploying(later)
    result = later.execute_sync(CALL)
    assert code(result) == "APPROVAL_PENDING"
    assert result.meta["approval"]["ticket"] == ticket  # type: ignore[index]
    assert person.asked == []


def test_an_answer_that_came_first_wins_over_the_one_given_now() -> None:
    store = MemoryApprovalStore()
    _, ran, ticket = pending_ticket(store)

    class RejectedMeanwhile(Elicits):
        """While the client is asked, a person rejects the ticket at the command line."""

        def request(self, request: ApprovalRequest) -> str:
            store.answer_ticket(ticket, TicketAnswer("rejected", "bo", "cli"))
            return super().request(request)

    now = ToolRegistry(approval=RejectedMeanwhile("allowed-once"), approval_store=store)
    ran_now = deploying(now)
    assert code(now.execute_sync(CALL)) == "DENIED"
    assert ran + ran_now == []
    closed = store.get_ticket(ticket)
    assert closed is not None
    assert closed.answer is not None
    assert (closed.answer.by, closed.state) == ("bo", TicketState.RESUMED)


def test_a_ticket_resume_cannot_find_names_the_store_it_read(tmp_path: Any) -> None:
    from dsh_tools.approvals import TicketNotFoundError
    from dsh_tools_plugins.approval_store import SqliteApprovalStore

    path = tmp_path / "elsewhere.sqlite3"
    registry = ToolRegistry(approval_store=SqliteApprovalStore(path))
    with pytest.raises(TicketNotFoundError) as raised:
        registry.resume_sync("t-nope")
    assert str(raised.value) == (
        f"approval ticket 't-nope' does not exist in the approval store "
        f"SqliteApprovalStore({str(path)!r})"
    )
    assert raised.value.code == "NOT_FOUND"
    with pytest.raises(TicketNotFoundError, match=r"in the approval store MemoryApprovalStore$"):
        ToolRegistry().resume_sync("t-nope")
