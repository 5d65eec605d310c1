"""lambdas.usecases.assign_agent: the session handed to an agent in one transaction, on moto."""

from __future__ import annotations

from typing import Any

import pytest

from lambdas.shared import keys
from lambdas.shared.records import HandoffStatus, Role, SessionStatus
from lambdas.shared.store import DynamoSessionStore, HandoffConflict, SessionNotActive
from tests.unit.handoffs import begin


def test_begin_writes_session_handoff_and_system_turn_in_one_transaction(store: DynamoSessionStore) -> None:
    # Given an active session with two turns
    session = store.sessions.create_session("c-1")
    store.turns.add_turn(session.session_id, Role.USER, "one")
    store.turns.add_turn(session.session_id, Role.ASSISTANT, "two")

    begun = begin(store, session.session_id)

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
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a session where a customer turn lands between the store's read and its transaction
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

    begun = begin(store, session.session_id)

    # Then the transaction was cancelled once, re-read, and took the next free number
    assert calls["n"] == 2
    assert begun.turn_number == 3
    numbers = [(t.turn_number, t.content) for t in store.turns.list_turns(session.session_id).items]
    assert numbers == [(1, "one"), (2, "concurrent"), (3, "handed over")]


def test_begin_refuses_a_session_that_is_not_active_and_writes_nothing(store: DynamoSessionStore) -> None:
    session = store.sessions.create_session("c-1")
    store.sessions.update_status(session.session_id, SessionStatus.DISCONNECTED)

    with pytest.raises(SessionNotActive, match="disconnected"):
        begin(store, session.session_id)
    with pytest.raises(SessionNotActive, match="missing"):
        begin(store, "no-such-session")
    assert store.handoffs.current_handoff(session.session_id) is None
    assert store.turns.list_turns(session.session_id).items == []


def test_a_session_that_ends_between_the_read_and_the_write_is_not_handed_over(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an active session the customer leaves after the use case read it
    session = store.sessions.create_session("c-1")
    original = store.sessions.get_session

    def read_then_leave(session_id: str, *, consistent: bool = True) -> Any:
        found = original(session_id, consistent=consistent)
        monkeypatch.setattr(store.sessions, "get_session", original)
        store.sessions.update_status(session_id, SessionStatus.DISCONNECTED)
        return found

    monkeypatch.setattr(store.sessions, "get_session", read_then_leave)

    # When the handoff begins / Then the write is refused: a closed session never becomes a handoff
    with pytest.raises(SessionNotActive, match="disconnected"):
        begin(store, session.session_id)
    after = store.sessions.get_session(session.session_id)
    assert after is not None
    assert (after.status, after.turn_count) == (SessionStatus.DISCONNECTED, 0)
    assert store.handoffs.current_handoff(session.session_id) is None
    assert store.turns.list_turns(session.session_id).items == []


def test_a_handoff_that_fails_between_the_read_and_the_write_is_not_assigned(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a queued handoff the workflow fails after the use case read it
    session = store.sessions.create_session("c-1")
    store.handoffs.put_handoff(session.session_id, reason="billing", handoff_id="h-1")
    read = store.table.get

    def read_then_fail(key: Any, **options: Any) -> Any:
        found = read(key, **options)
        if key == keys.handoff_key(session.session_id, "h-1"):
            monkeypatch.setattr(store.table, "get", read)
            store.handoffs.update_handoff(
                session.session_id, "h-1", status=HandoffStatus.FAILED, expected_status=HandoffStatus.QUEUED
            )
        return found

    monkeypatch.setattr(store.table, "get", read_then_fail)

    # When the handoff begins / Then it is refused: a failed handoff is never handed to an agent
    with pytest.raises(HandoffConflict):
        begin(store, session.session_id)
    handoff = store.handoffs.get_handoff(session.session_id, "h-1")
    assert handoff is not None
    assert (handoff.status, handoff.agent_id) == (HandoffStatus.FAILED, None)
    after = store.sessions.get_session(session.session_id)
    assert after is not None
    assert after.status == SessionStatus.ACTIVE
    assert store.turns.list_turns(session.session_id).items == []


def test_begin_retried_after_success_does_not_write_again(store: DynamoSessionStore) -> None:
    session = store.sessions.create_session("c-1")
    begin(store, session.session_id)

    again = begin(store, session.session_id)

    assert again.turn_number is None
    assert len(store.turns.list_turns(session.session_id).items) == 1


def test_begin_refuses_a_failed_handoff_record(store: DynamoSessionStore) -> None:
    session = store.sessions.create_session("c-1")
    store.handoffs.put_handoff(session.session_id, reason="billing", handoff_id="h-1", status=HandoffStatus.FAILED)

    with pytest.raises(HandoffConflict):
        begin(store, session.session_id)
    still = store.sessions.get_session(session.session_id)
    assert still is not None
    assert still.status == SessionStatus.ACTIVE


def test_begin_assigns_a_queued_handoff_and_keeps_its_creation_time(store: DynamoSessionStore) -> None:
    session = store.sessions.create_session("c-1")
    queued = store.handoffs.queue_handoff(
        session.session_id, handoff_id="h-1", reason="billing", priority="high", execution_arn=None, task_token="tok"
    )
    assert queued.status == HandoffStatus.QUEUED
    assert store.handoffs.waiting_for(session.session_id, "h-1") == "agent"

    begin(store, session.session_id)

    handoff = store.handoffs.get_handoff(session.session_id, "h-1")
    assert handoff is not None
    assert handoff.status == HandoffStatus.ASSIGNED
    assert handoff.created_at == queued.created_at
    assert store.handoffs.waiting_for(session.session_id, "h-1") is None  # the put replaced the token
