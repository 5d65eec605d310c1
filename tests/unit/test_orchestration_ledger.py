"""The store's handoff transaction and callback tokens, and the agent reservation race, on moto."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from lambdas.orchestration import handoff as handoff_steps
from lambdas.shared import env as lambda_env
from lambdas.shared.errors import HandoffNotFound
from lambdas.shared.records import Agent, HandoffStatus, Role, SessionStatus
from lambdas.shared.store import DynamoSessionStore, HandoffConflict, SessionNotActive
from lambdas.usecases.assign_agent import begin_handoff


@pytest.fixture
def ledger(store: DynamoSessionStore) -> DynamoSessionStore:
    """The store itself: the handoff writes are its handoffs aggregate (same client, table and clock)."""
    return store


def _begin(ledger: DynamoSessionStore, session_id: str, handoff_id: str = "h-1", agent_id: str = "a-1") -> Any:
    return begin_handoff(
        ledger,
        session_id,
        handoff_id=handoff_id,
        agent_id=agent_id,
        reason="billing",
        priority="normal",
        execution_arn="arn:exec",
        system_text="handed over",
    )


def test_begin_writes_session_handoff_and_system_turn_in_one_transaction(
    store: DynamoSessionStore, ledger: DynamoSessionStore
) -> None:
    # Given an active session with two turns
    session = store.sessions.create_session("c-1")
    store.turns.add_turn(session.session_id, Role.USER, "one")
    store.turns.add_turn(session.session_id, Role.ASSISTANT, "two")

    begun = _begin(ledger, session.session_id)

    assert begun.turn_number == 3
    moved = store.sessions.get_session(session.session_id)
    assert moved is not None
    assert moved.status == SessionStatus.HANDOFF
    assert moved.turn_count == 3
    handoff = store.handoffs.get_handoff(session.session_id, "h-1")
    assert handoff is not None
    assert (handoff.status, handoff.agent_id, handoff.execution_arn) == (HandoffStatus.ASSIGNED, "a-1", "arn:exec")
    assert [(t.turn_number, t.role, t.content) for t in store.turns.list_turns(session.session_id).items][-1] == (
        3,
        Role.SYSTEM,
        "handed over",
    )
    # and the turn counter stays exact: the next turn is 4
    assert store.turns.add_turn(session.session_id, Role.AGENT, "hi").turn_number == 4


def test_begin_rereads_when_a_concurrent_turn_moves_the_counter(
    store: DynamoSessionStore, ledger: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a session where a customer turn lands between the ledger's read and its transaction
    session = store.sessions.create_session("c-1")
    store.turns.add_turn(session.session_id, Role.USER, "one")
    original = store.sessions.get_session
    calls = {"n": 0}

    def read_then_race(session_id: str, *, consistent: bool = True) -> Any:
        found = original(session_id, consistent=consistent)
        calls["n"] += 1
        if calls["n"] == 1:
            store.turns.add_turn(session_id, Role.USER, "concurrent")
        return found

    monkeypatch.setattr(store.sessions, "get_session", read_then_race)

    begun = _begin(ledger, session.session_id)

    # Then the transaction was cancelled once, re-read, and took the next free number
    assert calls["n"] == 2
    assert begun.turn_number == 3
    numbers = [(t.turn_number, t.content) for t in store.turns.list_turns(session.session_id).items]
    assert numbers == [(1, "one"), (2, "concurrent"), (3, "handed over")]


def test_begin_refuses_a_session_that_is_not_active_and_writes_nothing(
    store: DynamoSessionStore, ledger: DynamoSessionStore
) -> None:
    session = store.sessions.create_session("c-1")
    store.sessions.update_status(session.session_id, SessionStatus.DISCONNECTED)

    with pytest.raises(SessionNotActive, match="disconnected"):
        _begin(ledger, session.session_id)
    with pytest.raises(SessionNotActive, match="missing"):
        _begin(ledger, "no-such-session")
    assert store.handoffs.current_handoff(session.session_id) is None
    assert store.turns.list_turns(session.session_id).items == []


def test_begin_retried_after_success_does_not_write_again(
    store: DynamoSessionStore, ledger: DynamoSessionStore
) -> None:
    session = store.sessions.create_session("c-1")
    _begin(ledger, session.session_id)

    again = _begin(ledger, session.session_id)

    assert again.turn_number is None
    assert len(store.turns.list_turns(session.session_id).items) == 1


def test_begin_refuses_a_failed_handoff_record(store: DynamoSessionStore, ledger: DynamoSessionStore) -> None:
    session = store.sessions.create_session("c-1")
    store.handoffs.put_handoff(session.session_id, reason="billing", handoff_id="h-1", status=HandoffStatus.FAILED)

    with pytest.raises(HandoffConflict):
        _begin(ledger, session.session_id)
    still = store.sessions.get_session(session.session_id)
    assert still is not None
    assert still.status == SessionStatus.ACTIVE


def test_begin_assigns_a_queued_handoff_and_keeps_its_creation_time(
    store: DynamoSessionStore, ledger: DynamoSessionStore
) -> None:
    session = store.sessions.create_session("c-1")
    queued = ledger.handoffs.queue_handoff(
        session.session_id, handoff_id="h-1", reason="billing", priority="high", execution_arn=None, task_token="tok"
    )
    assert queued.status == HandoffStatus.QUEUED
    assert ledger.handoffs.waiting_for(session.session_id, "h-1") == "agent"

    _begin(ledger, session.session_id)

    handoff = store.handoffs.get_handoff(session.session_id, "h-1")
    assert handoff is not None
    assert handoff.status == HandoffStatus.ASSIGNED
    assert handoff.created_at == queued.created_at
    assert ledger.handoffs.waiting_for(session.session_id, "h-1") is None  # the put replaced the token


def test_a_callback_token_is_taken_exactly_once_even_concurrently(
    store: DynamoSessionStore, ledger: DynamoSessionStore
) -> None:
    session = store.sessions.create_session("c-1")
    store.handoffs.put_handoff(session.session_id, reason="billing", handoff_id="h-1")
    ledger.handoffs.await_callback(session.session_id, "h-1", "reply", "token-1")

    assert ledger.handoffs.claim_callback(session.session_id, "h-1", "agent") is None  # waits for something else
    results: list[str | None] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(ledger.handoffs.claim_callback(session.session_id, "h-1", "reply"))
        )
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert results.count("token-1") == 1
    assert results.count(None) == 7


def test_requeue_drops_the_agent_and_any_token(store: DynamoSessionStore, ledger: DynamoSessionStore) -> None:
    session = store.sessions.create_session("c-1")
    _begin(ledger, session.session_id)
    ledger.handoffs.await_callback(session.session_id, "h-1", "reply", "token-1")

    ledger.handoffs.requeue_handoff(session.session_id, "h-1")

    handoff = store.handoffs.get_handoff(session.session_id, "h-1")
    assert handoff is not None
    assert (handoff.status, handoff.agent_id) == (HandoffStatus.QUEUED, None)
    assert ledger.handoffs.claim_callback(session.session_id, "h-1", "reply") is None


@pytest.fixture
def steps_env(table_name: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TABLE_NAME", table_name)
    lambda_env.reset()
    yield
    lambda_env.reset()


def test_concurrent_reservations_never_share_an_agent(store: DynamoSessionStore, steps_env: None) -> None:
    # Given three available agents and ten handoffs asking at once
    for n in range(3):
        store.agents.put_agent(Agent(agent_id=f"agent-{n}", skills=("billing",)))
    winners: list[str | None] = []
    lock = threading.Lock()

    def ask(n: int) -> None:
        agent_id = handoff_steps._reserve_first("billing", f"session-{n}")
        with lock:
            winners.append(agent_id)

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    # Then each agent went to exactly one handoff
    taken = [w for w in winners if w is not None]
    assert sorted(taken) == ["agent-0", "agent-1", "agent-2"]
    assert winners.count(None) == 7


def test_cleanup_plan_cutoff_honours_grace_override_and_never_a_future_now(monkeypatch: pytest.MonkeyPatch) -> None:
    import time as clock

    from lambdas.orchestration import cleanup_worker

    monkeypatch.setenv("CLEANUP_GRACE_SECONDS", "3600")
    monkeypatch.setenv("CLEANUP_SHARDS", "3")
    lambda_env.reset()
    now = int(clock.time())
    plan = cleanup_worker.plan.__wrapped__
    default = plan({"input": {}}, None)
    assert now - 3600 <= default["cutoff"] <= int(clock.time()) - 3600
    assert default["cutoff_text"] == str(default["cutoff"])
    assert default["shards"] == ["CLEANUP#0", "CLEANUP#1", "CLEANUP#2"]
    assert plan({"input": {"now": 1_000_000}}, None)["cutoff"] == 1_000_000 - 3600
    assert plan({"input": {"now": now + 86400}}, None)["cutoff"] >= now - 3600  # a future now is ignored
    assert plan({"input": {"now": 1_000_000, "older_than_seconds": 0}}, None)["cutoff"] == 1_000_000
    assert plan({"input": {"older_than_seconds": 10**9}}, None)["cutoff"] <= int(clock.time()) - 3600
    lambda_env.reset()


def test_a_stored_callback_token_never_leaves_through_public(
    store: DynamoSessionStore, ledger: DynamoSessionStore
) -> None:
    from lambdas.shared import keys
    from lambdas.shared.serialize import marshal_item, public, unmarshal_item

    session = store.sessions.create_session("c-1")
    store.handoffs.put_handoff(session.session_id, reason="billing", handoff_id="h-1")
    ledger.handoffs.await_callback(session.session_id, "h-1", "agent", "secret-token")
    raw = store.table.client.get_item(
        TableName=store.table.table_name, Key=marshal_item(keys.handoff_key(session.session_id, "h-1"))
    )
    item = unmarshal_item(raw["Item"])
    assert item["callback_token"] == "secret-token"
    assert "callback_token" not in public(item)
    assert public(item)["waiting_for"] == "agent"


@pytest.mark.parametrize(
    ("status", "after"),
    [
        (HandoffStatus.COMPLETED, HandoffStatus.COMPLETED),  # closed meanwhile: its completion stays
        (HandoffStatus.FAILED, HandoffStatus.FAILED),
        (HandoffStatus.QUEUED, HandoffStatus.FAILED),
        (HandoffStatus.ESCALATED, HandoffStatus.FAILED),
    ],
)
def test_a_late_failure_never_overwrites_a_handoff_that_is_over(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch, status: HandoffStatus, after: HandoffStatus
) -> None:
    monkeypatch.setattr(handoff_steps, "store", lambda: store)
    session = store.sessions.create_session("cust-1")
    store.handoffs.put_handoff(session.session_id, reason="billing", status=status, handoff_id="h-1")
    state = {"session_id": session.session_id, "error": {"Error": "CustomerLeft"}}
    result = handoff_steps.fail.__wrapped__({"state": state, "handoff_id": "h-1"}, None)
    handoff = store.handoffs.get_handoff(session.session_id, "h-1")
    assert handoff is not None
    assert handoff.status == after
    assert result["marked_failed"] is (status != after)
    assert result["reason"] == "the customer left before an agent took the handoff"


def _queue(ledger: DynamoSessionStore, session_id: str, token: str) -> Any:
    return ledger.handoffs.queue_handoff(
        session_id, handoff_id="h-1", reason="billing", priority="normal", execution_arn="arn:exec", task_token=token
    )


def test_a_late_assignment_message_never_replaces_the_live_wait(
    store: DynamoSessionStore, ledger: DynamoSessionStore
) -> None:
    # Given a handoff that was queued with its token, then assigned, and now waits for the reply
    session = store.sessions.create_session("c-1")
    queued = _queue(ledger, session.session_id, "token-agent")
    assert queued is not None
    assert queued.status == HandoffStatus.QUEUED
    _begin(ledger, session.session_id)
    ledger.handoffs.await_callback(session.session_id, "h-1", "reply", "token-reply")

    # When the assignment message comes again (a redelivery, or a redrive from its DLQ)
    again = _queue(ledger, session.session_id, "token-agent")

    # Then nothing is written: the live wait's token and what it waits for are untouched
    assert again is None
    assert ledger.handoffs.waiting_for(session.session_id, "h-1") == "reply"
    assert ledger.handoffs.claim_callback(session.session_id, "h-1", "reply") == "token-reply"
    handoff = store.handoffs.get_handoff(session.session_id, "h-1")
    assert handoff is not None
    assert handoff.status == HandoffStatus.ASSIGNED


def test_a_redelivered_assignment_message_of_a_waiting_handoff_is_stored_again(
    store: DynamoSessionStore, ledger: DynamoSessionStore
) -> None:
    session = store.sessions.create_session("c-1")
    assert _queue(ledger, session.session_id, "token-1") is not None
    assert _queue(ledger, session.session_id, "token-1") is not None
    assert ledger.handoffs.claim_callback(session.session_id, "h-1", "agent") == "token-1"


def test_a_managers_wait_is_stored_only_while_the_handoff_is_escalated(
    store: DynamoSessionStore, ledger: DynamoSessionStore
) -> None:
    session = store.sessions.create_session("c-1")
    store.handoffs.put_handoff(session.session_id, reason="billing", handoff_id="h-1")
    assert not ledger.handoffs.await_callback(
        session.session_id, "h-1", "agent", "token-1", while_status=HandoffStatus.ESCALATED
    )
    assert ledger.handoffs.waiting_for(session.session_id, "h-1") is None
    with pytest.raises(HandoffNotFound):
        ledger.handoffs.await_callback(
            session.session_id, "h-9", "agent", "token-1", while_status=HandoffStatus.ESCALATED
        )
