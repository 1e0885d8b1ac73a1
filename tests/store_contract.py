"""What every approval store must do, as tests a store's own test module inherits.

A store's tests subclass :class:`StoreContract` and provide a ``store`` fixture that
returns a fresh, empty store (an :class:`~dsh_tools.approvals.ApprovalStore`, a
:class:`~dsh_tools.approvals.TicketStore` and a :class:`~dsh_tools.approvals.JournalStore`);
``tests/test_ticket_stores.py`` runs it on the
memory and SQLite stores. Expiry is judged by the store's own clock, so the contract
never sets one: a ticket that "has expired" was made with an ``expires_at`` in the past.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs
import pytest

from dsh_tools._json import snapshot
from dsh_tools._models import ApprovalOutcome
from dsh_tools.approvals import (
    ApprovalKey,
    ApprovalTicket,
    JournalBegin,
    JournalConflictError,
    JournalEntry,
    JournalState,
    TicketAnswer,
    TicketAnsweredError,
    TicketExpiredError,
    TicketNotFoundError,
    TicketState,
    call_digest,
)

HOUR = 3600.0


def ticket(
    path: str = "a.txt", *, agent: str = "coder", expires_in: float = HOUR, **fields: Any
) -> ApprovalTicket:
    """A new pending ticket for ``write(path=...)`` by ``agent``."""
    arguments = snapshot({"path": path})
    now = time.time()
    return ApprovalTicket.new(
        ApprovalKey.for_call(agent, "write", arguments),
        "call-1",
        arguments,  # type: ignore[arg-type]
        created_at=now,
        expires_at=now + expires_in,
        **fields,
    )


def answer(outcome: str = "allowed-once", by: str = "ana") -> TicketAnswer:
    return TicketAnswer(outcome, by, "cli", feedback="fine" if outcome == "rejected" else None)  # type: ignore[arg-type]


class StoreContract:
    """The behaviour of a store; a subclass provides the ``store`` fixture (a fresh,
    empty store per test)."""

    # ---------------------------------------------------------- remembered answers

    def test_remembers_always_answers_per_key(self, store: Any) -> None:
        key = ApprovalKey.for_call("coder", "write", {"path": "a"})
        assert store.recall(key) is None
        store.remember(key, ApprovalOutcome.ALLOWED_ALWAYS)
        assert store.recall(key) is ApprovalOutcome.ALLOWED_ALWAYS
        store.remember(key, ApprovalOutcome.REJECTED_ALWAYS)
        assert store.recall(key) is ApprovalOutcome.REJECTED_ALWAYS
        assert store.recall(ApprovalKey.for_call("other", "write", {"path": "a"})) is None
        assert store.recall(ApprovalKey.for_tool("coder", "write")) is None

    # ---------------------------------------------------------- tickets

    def test_a_ticket_is_kept_whole(self, store: Any) -> None:
        made = ticket(
            reason="writes files",
            card=snapshot({"card": "generic", "title": "write a.txt"}),
            asked_by=snapshot({"plugin": "permissions", "rule": "ask write", "line": 3}),
        )
        kept = store.open_ticket(made)
        assert attrs.evolve(kept, created_at=0, expires_at=0) == attrs.evolve(
            made, created_at=0, expires_at=0
        )
        # Stamped by the store's clock, with the lifetime it was given.
        assert kept.expires_at - kept.created_at == pytest.approx(HOUR)
        assert store.get_ticket(made.id) == kept
        assert store.get_ticket(made.id).intact()
        assert store.get_ticket("t-unknown") is None

    def test_the_same_call_gets_its_open_ticket_back(self, store: Any) -> None:
        first = store.open_ticket(ticket())
        assert store.open_ticket(ticket()) == first
        assert store.find_ticket(first.key) == first
        other = store.open_ticket(ticket("b.txt"))
        assert other.id != first.id
        elsewhere = store.open_ticket(ticket(agent="reviewer"))
        assert elsewhere.id != first.id
        assert [t.id for t in store.list_tickets()] == [first.id, other.id, elsewhere.id]
        assert [t.id for t in store.list_tickets(agent="reviewer")] == [elsewhere.id]

    def test_an_answered_ticket_is_still_open_and_a_resumed_one_is_not(self, store: Any) -> None:
        first = store.open_ticket(ticket())
        store.answer_ticket(first.id, answer())
        assert store.open_ticket(ticket()).id == first.id
        assert store.consume_ticket(first.id) is not None
        assert store.find_ticket(first.key) is None
        assert store.open_ticket(ticket()).id != first.id

    def test_one_answer_wins_and_a_second_is_too_late(self, store: Any) -> None:
        made = store.open_ticket(ticket())
        answered = store.answer_ticket(made.id, answer("allowed-always", by="ana"))
        assert answered.state is TicketState.ANSWERED
        assert answered.answer == answer("allowed-always", by="ana")
        assert answered.answered_at is not None
        with pytest.raises(TicketAnsweredError, match="too late"):
            store.answer_ticket(made.id, answer("rejected", by="bo"))
        assert store.get_ticket(made.id).answer.by == "ana"

    def test_an_answer_keeps_its_feedback(self, store: Any) -> None:
        made = store.open_ticket(ticket())
        store.answer_ticket(made.id, answer("rejected"))
        assert store.get_ticket(made.id).answer.feedback == "fine"

    def test_an_answer_keeps_the_end_of_its_grant(self, store: Any) -> None:
        made = store.open_ticket(ticket())
        ends = TicketAnswer("allowed-always", "ana", "cli", expires_in_s=90.5, uses=3)  # type: ignore[arg-type]
        store.answer_ticket(made.id, ends)
        assert store.get_ticket(made.id).answer == ends

    def test_answers_to_unknown_or_expired_tickets_are_refused(self, store: Any) -> None:
        with pytest.raises(TicketNotFoundError):
            store.answer_ticket("t-unknown", answer())
        old = store.open_ticket(ticket(expires_in=-1.0))
        assert store.get_ticket(old.id).state is TicketState.EXPIRED
        with pytest.raises(TicketExpiredError):
            store.answer_ticket(old.id, answer())
        assert store.find_ticket(old.key) is None
        assert store.open_ticket(ticket()).id != old.id

    def test_a_ticket_is_consumed_once_and_only_when_answered(self, store: Any) -> None:
        made = store.open_ticket(ticket())
        assert store.consume_ticket(made.id) is None  # pending
        store.answer_ticket(made.id, answer())
        won = store.consume_ticket(made.id)
        assert won is not None
        assert won.state is TicketState.RESUMED
        assert won.resumed_at is not None
        assert store.consume_ticket(made.id) is None
        assert store.consume_ticket("t-unknown") is None
        assert store.get_ticket(made.id).state is TicketState.RESUMED

    def test_an_expired_answer_is_not_consumed(self, store: Any) -> None:
        made = store.open_ticket(ticket(expires_in=0.5))
        store.answer_ticket(made.id, answer())
        deadline = time.time() + 30
        while store.get_ticket(made.id).state is not TicketState.EXPIRED:
            assert time.time() < deadline, "the ticket never expired"
            time.sleep(0.05)
        assert store.consume_ticket(made.id) is None

    def test_list_by_state(self, store: Any) -> None:
        waiting = store.open_ticket(ticket("a"))
        answered = store.open_ticket(ticket("b"))
        store.answer_ticket(answered.id, answer())
        assert [t.id for t in store.list_tickets(state=TicketState.PENDING)] == [waiting.id]
        assert [t.id for t in store.list_tickets(state=TicketState.ANSWERED)] == [answered.id]

    def test_eight_threads_consume_one_ticket_once(self, store: Any) -> None:
        made = store.open_ticket(ticket())
        store.answer_ticket(made.id, answer())
        barrier = threading.Barrier(8)

        def consume(_: int) -> object:
            barrier.wait()
            return store.consume_ticket(made.id)

        with ThreadPoolExecutor(8) as pool:
            won = [r for r in pool.map(consume, range(8)) if r is not None]
        assert len(won) == 1

    def test_eight_threads_answer_one_ticket_once(self, store: Any) -> None:
        made = store.open_ticket(ticket())
        barrier = threading.Barrier(8)

        def respond(index: int) -> str:
            barrier.wait()
            try:
                store.answer_ticket(made.id, answer(by=f"person-{index}"))
            except TicketAnsweredError:
                return "late"
            return "won"

        with ThreadPoolExecutor(8) as pool:
            outcomes = sorted(pool.map(respond, range(8)))
        assert outcomes == ["late"] * 7 + ["won"]

    def test_a_waiter_is_woken_by_an_answer(self, store: Any) -> None:
        made = store.open_ticket(ticket())
        assert store.wait_for_answer(made.id, 0.0).state is TicketState.PENDING
        answered = threading.Event()

        def respond() -> None:
            answered.wait()
            store.answer_ticket(made.id, answer())

        thread = threading.Thread(target=respond)
        thread.start()
        answered.set()
        seen = store.wait_for_answer(made.id, 60.0)
        thread.join()
        assert seen.state is TicketState.ANSWERED
        assert store.wait_for_answer("t-unknown", 0.0) is None

    def test_a_watcher_is_told_of_an_answer(self, store: Any) -> None:
        made = store.open_ticket(ticket())
        told = threading.Event()
        stop = store.watch_ticket(made.id, told.set)
        try:
            store.answer_ticket(made.id, answer())
            assert told.wait(30)
        finally:
            stop()
        assert store.get_ticket(made.id).state is TicketState.ANSWERED

    def test_many_waiters_share_the_store_s_one_watcher(self, store: Any) -> None:
        made = [store.open_ticket(ticket(f"{n}.txt")) for n in range(50)]
        told = {each.id: threading.Event() for each in made}
        before = threading.active_count()
        stops = [store.watch_ticket(each.id, told[each.id].set) for each in made]
        try:
            assert threading.active_count() - before <= 2  # a looking thread, a listener
            for each in made[::2]:
                store.answer_ticket(each.id, answer())
            assert all(told[each.id].wait(30) for each in made[::2])
        finally:
            for stop in stops:
                stop()

    # ---------------------------------------------------------- the call journal

    def test_a_journal_entry_starts_once_per_key(self, store: Any) -> None:
        begun = store.begin_call(entry(), HOUR)
        assert begun.started
        assert begun.ticket is None
        assert begun.entry.state is JournalState.STARTED
        assert begun.entry.lease_expires_at - begun.entry.started_at == pytest.approx(HOUR)
        assert store.get_call("coder", "key-1") == begun.entry
        again = store.begin_call(entry(call_id="call-2", owner="other"), HOUR)
        assert not again.started
        assert again.entry == begun.entry
        assert store.get_call("coder", "key-2") is None
        # The key is the agent's own: another agent's key of the same name is another call.
        assert store.begin_call(entry(agent="reviewer"), HOUR).started

    def test_a_key_reused_with_other_arguments_is_refused(self, store: Any) -> None:
        store.begin_call(entry(), HOUR)
        with pytest.raises(JournalConflictError, match="'key-1' of agent 'coder'") as raised:
            store.begin_call(entry(path="b.txt"), HOUR)
        assert raised.value.code == "INVALID_ARGS"
        with pytest.raises(JournalConflictError, match="a new key for 'delete'"):
            store.begin_call(entry(tool="delete"), HOUR)

    def test_a_finished_entry_keeps_its_result(self, store: Any) -> None:
        store.begin_call(entry(), HOUR)
        result = snapshot({"content": [{"type": "text", "text": "wrote"}], "n": 1.5})
        assert not store.finish_call("coder", "key-1", "someone-else", result)
        assert store.finish_call("coder", "key-1", "owner-1", result)
        kept = store.get_call("coder", "key-1")
        assert kept.state is JournalState.FINISHED
        assert kept.result == result
        assert kept.finished_at is not None
        assert not store.finish_call("coder", "key-1", "owner-1", None)  # once
        assert not store.renew_call("coder", "key-1", "owner-1", HOUR)
        repeat = store.begin_call(entry(call_id="call-2"), HOUR)
        assert not repeat.started
        assert repeat.entry == kept

    def test_an_entry_whose_lease_ran_out_is_unknown_until_retaken(self, store: Any) -> None:
        store.begin_call(entry(), 0.0)
        assert store.get_call("coder", "key-1").state is JournalState.UNKNOWN
        assert store.begin_call(entry(), HOUR).entry.state is JournalState.UNKNOWN
        retaken = store.retake_call("coder", "key-1", "owner-2", HOUR)
        assert retaken.state is JournalState.STARTED
        assert (retaken.owner, retaken.attempts) == ("owner-2", 2)
        assert store.retake_call("coder", "key-1", "owner-3", HOUR) is None
        # The first owner came back too late: the entry is no longer its own.
        assert not store.renew_call("coder", "key-1", "owner-1", HOUR)
        assert not store.finish_call("coder", "key-1", "owner-1", "first")
        assert store.finish_call("coder", "key-1", "owner-2", "second")
        assert store.get_call("coder", "key-1").result == "second"
        assert store.retake_call("coder", "key-1", "owner-3", HOUR) is None

    def test_a_renewed_lease_keeps_the_entry_started(self, store: Any) -> None:
        store.begin_call(entry(), 0.0)
        assert store.renew_call("coder", "key-1", "owner-1", HOUR)
        assert store.get_call("coder", "key-1").state is JournalState.STARTED
        assert not store.renew_call("coder", "key-1", "owner-2", HOUR)
        assert store.retake_call("coder", "key-1", "owner-2", HOUR) is None

    def test_an_approved_ticket_is_taken_with_the_entry_it_starts(self, store: Any) -> None:
        waiting = store.open_ticket(ticket())
        # Not answered: nothing is taken and nothing starts.
        assert store.begin_call(entry(), HOUR, waiting.id) == JournalBegin(None, started=False)
        assert store.get_call("coder", "key-1") is None
        store.answer_ticket(waiting.id, answer())
        begun = store.begin_call(entry(), HOUR, waiting.id)
        assert begun.started
        assert begun.entry.ticket_id == waiting.id
        assert begun.ticket.state is TicketState.RESUMED
        assert store.get_ticket(waiting.id).state is TicketState.RESUMED

    def test_a_ticket_is_not_spent_on_a_key_already_journaled(self, store: Any) -> None:
        store.begin_call(entry(), HOUR)
        made = store.open_ticket(ticket())
        store.answer_ticket(made.id, answer())
        repeat = store.begin_call(entry(call_id="call-2"), HOUR, made.id)
        assert not repeat.started
        assert repeat.entry.call_id == "call-1"
        assert store.get_ticket(made.id).state is TicketState.ANSWERED
        # Spent once, the ticket starts nothing more.
        assert store.begin_call(entry(key="key-2"), HOUR, made.id).started
        assert store.begin_call(entry(key="key-3"), HOUR, made.id).entry is None
        assert store.get_call("coder", "key-3") is None

    def test_eight_threads_start_one_key_once(self, store: Any) -> None:
        barrier = threading.Barrier(8)

        def begin(index: int) -> bool:
            barrier.wait()
            return bool(store.begin_call(entry(owner=f"owner-{index}"), HOUR).started)

        with ThreadPoolExecutor(8) as pool:
            assert sorted(pool.map(begin, range(8))) == [False] * 7 + [True]

    def test_eight_threads_retake_one_unknown_entry_once(self, store: Any) -> None:
        store.begin_call(entry(), 0.0)
        barrier = threading.Barrier(8)

        def retake(index: int) -> bool:
            barrier.wait()
            return store.retake_call("coder", "key-1", f"owner-{index}", HOUR) is not None

        with ThreadPoolExecutor(8) as pool:
            assert sorted(pool.map(retake, range(8))) == [False] * 7 + [True]

    def test_list_journal_entries_by_agent_and_state(self, store: Any) -> None:
        store.begin_call(entry(key="a"), HOUR)
        store.begin_call(entry(key="b"), 0.0)
        store.begin_call(entry(key="c", agent="reviewer"), HOUR)
        store.finish_call("reviewer", "c", "owner-1", None)
        assert [e.key for e in store.list_calls()] == ["a", "b", "c"]
        assert [e.key for e in store.list_calls(agent="coder")] == ["a", "b"]
        assert [e.key for e in store.list_calls(state=JournalState.UNKNOWN)] == ["b"]
        assert [e.key for e in store.list_calls(state=JournalState.FINISHED)] == ["c"]

    def test_list_the_journal_entries_of_one_call(self, store: Any) -> None:
        store.begin_call(entry("a.txt", key="a"), HOUR)
        store.begin_call(entry("a.txt", key="b"), 0.0)
        store.begin_call(entry("b.txt", key="c"), 0.0)
        store.begin_call(entry("a.txt", key="d", agent="reviewer"), 0.0)
        digest = entry("a.txt").arguments_sha256
        of_call = store.list_calls(agent="coder", tool="write", arguments_sha256=digest)
        assert [e.key for e in of_call] == ["a", "b"]
        unknown = store.list_calls(
            agent="coder", state=JournalState.UNKNOWN, tool="write", arguments_sha256=digest
        )
        assert [e.key for e in unknown] == ["b"]
        assert [e.key for e in store.list_calls(tool="write", arguments_sha256=digest)] == [
            "a",
            "b",
            "d",
        ]
        assert store.list_calls(tool="other") == []

    def test_a_begin_that_looks_first_meets_an_earlier_unfinished_attempt(self, store: Any) -> None:
        store.begin_call(entry("a.txt", key="done"), HOUR)
        store.finish_call("coder", "done", "owner-1", "charged")  # finished: not met
        # Running (or killed less than a lease ago): met, as an unknown one is.
        store.begin_call(entry("a.txt", key="live"), HOUR)
        store.begin_call(entry("b.txt", key="other-args"), 0.0)
        store.begin_call(entry("a.txt", key="died", call_id="call-0"), 0.0)
        store.begin_call(entry("a.txt", key="died-later", call_id="call-9"), 0.0)
        store.begin_call(entry("a.txt", key="reviewers", agent="reviewer"), 0.0)
        looked = store.begin_call(entry(key="key-1"), HOUR, earlier=True)
        assert (looked.entry, looked.started, looked.ticket) == (None, False, None)
        assert looked.earlier.key == "live"  # the oldest unfinished; nothing began
        assert looked.earlier.state is JournalState.STARTED
        assert store.get_call("coder", "key-1") is None
        store.finish_call("coder", "live", "owner-1", "charged")
        looked = store.begin_call(entry(key="key-1"), HOUR, earlier=True)
        assert looked.earlier.key == "died"
        assert looked.earlier.state is JournalState.UNKNOWN
        # Its own key's unknown entry is the begin's to find, not an earlier attempt.
        store.begin_call(entry(key="mine"), 0.0)
        for key in ("died", "died-later"):
            store.retake_call("coder", key, "owner-2", HOUR)
            store.finish_call("coder", key, "owner-2", None)
        again = store.begin_call(entry(key="mine"), HOUR, earlier=True)
        assert again.earlier is None
        assert (again.started, again.entry.key) == (False, "mine")
        store.retake_call("coder", "mine", "owner-2", HOUR)  # running again: met
        assert store.begin_call(entry(key="key-1"), HOUR, earlier=True).earlier.key == "mine"
        store.finish_call("coder", "mine", "owner-2", None)
        begun = store.begin_call(entry(key="key-1"), HOUR, earlier=True)
        assert begun.started
        assert begun.earlier is None
        assert store.begin_call(entry(key="key-2"), HOUR).earlier is None  # not asked

    def test_finished_entries_older_than_the_retention_are_pruned(self, store: Any) -> None:
        assert store.journal_retention_s == 7 * 24 * HOUR  # a week unless told otherwise
        store.begin_call(entry(key="done"), HOUR)
        assert store.finish_call("coder", "done", "owner-1", "charged")
        store.begin_call(entry("b.txt", key="running"), HOUR)
        store.begin_call(entry("c.txt", key="died"), 0.0)  # its lease ran out: unknown
        assert store.prune_calls() == 0  # finished well within the week
        assert store.prune_calls(HOUR) == 0
        assert store.prune_calls(0.0) == 1  # finished 0 s ago or more: dropped
        assert store.get_call("coder", "done") is None
        # A started entry (its owner may be alive) and an unknown one (a reconcile step
        # or a person settles it) stay, however old.
        assert store.get_call("coder", "running").state is JournalState.STARTED
        assert store.get_call("coder", "died").state is JournalState.UNKNOWN
        assert store.prune_calls(0.0) == 0
        # A repeat of a pruned key is a new call: it starts (and runs) again.
        assert store.begin_call(entry(key="done", call_id="call-2"), HOUR).started

    @pytest.mark.parametrize("bad", [-1.0, float("inf"), float("nan"), True, "1d"])
    def test_a_retention_that_is_not_a_duration_is_refused(self, store: Any, bad: Any) -> None:
        with pytest.raises(ValueError, match=r"older_than_s must be a finite number of seconds"):
            store.prune_calls(bad)


def entry(
    path: str = "a.txt",
    *,
    agent: str = "coder",
    key: str = "key-1",
    tool: str = "write",
    call_id: str = "call-1",
    owner: str = "owner-1",
) -> JournalEntry:
    """A journal entry (not yet started) for ``tool(path=...)`` by ``agent``."""
    return JournalEntry(agent, key, tool, call_digest(tool, {"path": path}), call_id, owner)
