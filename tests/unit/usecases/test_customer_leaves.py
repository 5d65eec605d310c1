"""lambdas.usecases.customer_leaves: a customer's connection ends, and with it the session and any handoff."""

from __future__ import annotations

from typing import Any

import pytest

from embedded.clock import FakeClock
from lambdas.shared.records import Agent, AgentStatus, HandoffStatus, SessionStatus
from lambdas.shared.store import DynamoSessionStore
from lambdas.usecases.customer_leaves import (
    CUSTOMER_LEFT,
    CUSTOMER_LEFT_WAITING,
    SESSION_DELETED,
    delete_during_handoff,
    disconnect_connection,
)
from tests.unit.handoffs import begin

CONN = "conn-1"


class Waits:
    """The caller's way of stopping a workflow's wait: records what it was asked to stop."""

    def __init__(self) -> None:
        self.stopped: list[tuple[str, str]] = []

    def __call__(self, token: str, handoff_id: str) -> bool:
        self.stopped.append((token, handoff_id))
        return True


@pytest.fixture
def waits() -> Waits:
    return Waits()


def connected(store: DynamoSessionStore, connection_id: str = CONN) -> str:
    session_id = store.sessions.create_session("alice").session_id
    store.connections.put_connection(
        connection_id, session_id=session_id, customer_id="alice", domain_name="d", stage="s"
    )
    store.sessions.set_connection(session_id, connection_id)
    return session_id


def test_an_unknown_connection_changes_nothing(store: DynamoSessionStore, waits: Waits) -> None:
    assert disconnect_connection(store, "nobody", stop_wait=waits) == "unknown"


def test_the_live_connection_disconnects_its_session_and_is_forgotten(store: DynamoSessionStore, waits: Waits) -> None:
    session_id = connected(store)
    assert disconnect_connection(store, CONN, stop_wait=waits) == "disconnected"
    session = store.sessions.get_session(session_id)
    assert session is not None
    assert (session.status, session.connection_id) == (SessionStatus.DISCONNECTED, None)
    assert store.connections.get_connection(CONN) is None
    assert disconnect_connection(store, CONN, stop_wait=waits) == "unknown"


def test_an_older_connection_of_a_resumed_session_leaves_it_open(store: DynamoSessionStore, waits: Waits) -> None:
    session_id = connected(store)
    store.connections.put_connection("conn-2", session_id=session_id, customer_id="alice", domain_name="d", stage="s")
    store.sessions.set_connection(session_id, "conn-2")
    assert disconnect_connection(store, CONN, stop_wait=waits) == "superseded"
    session = store.sessions.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.ACTIVE


def test_leaving_during_an_assigned_handoff_closes_it_and_releases_the_agent(
    store: DynamoSessionStore, waits: Waits, clock: FakeClock
) -> None:
    session_id = connected(store)
    store.agents.put_agent(Agent(agent_id="a-1", skills=("billing",), status=AgentStatus.AVAILABLE))
    store.agents.reserve_agent("a-1", session_id)
    begin(store, session_id)
    clock.advance(30)
    assert disconnect_connection(store, CONN, stop_wait=waits) == "disconnected"
    # The session is disconnected now, its connection forgotten, and waits in the cleanup index from now
    session = store.sessions.get_session(session_id)
    assert session is not None
    assert (session.status, session.connection_id) == (SessionStatus.DISCONNECTED, None)
    assert (session.disconnected_at, session.cleanup_at, session.updated_at) == (int(clock()),) * 3
    assert [c.session_id for c in store.sessions.sessions_awaiting_cleanup(int(clock()) + 1).items] == [session_id]
    handoff = store.handoffs.get_handoff(session_id, "h-1")
    assert handoff is not None
    assert handoff.status == HandoffStatus.COMPLETED
    raw = store.table.get({"PK": f"SESSION#{session_id}", "SK": "HANDOFF#h-1"})
    assert raw is not None
    assert raw["resolution"] == CUSTOMER_LEFT
    agent = store.agents.get_agent("a-1")
    assert agent is not None
    assert agent.status == AgentStatus.AVAILABLE
    assert waits.stopped == []


def test_leaving_while_the_handoff_waits_fails_it_and_stops_the_wait_with_its_token(
    store: DynamoSessionStore, waits: Waits, clock: FakeClock
) -> None:
    session_id = connected(store)
    store.handoffs.queue_handoff(
        session_id, handoff_id="h-1", reason="billing", priority="normal", execution_arn=None, task_token="tok"
    )
    clock.advance(60)
    assert disconnect_connection(store, CONN, stop_wait=waits) == "disconnected"
    raw = store.table.get({"PK": f"SESSION#{session_id}", "SK": "HANDOFF#h-1"})
    assert raw is not None
    assert (raw["status"], raw["resolution"], raw.get("callback_token")) == ("failed", CUSTOMER_LEFT_WAITING, None)
    assert "waiting_for" not in raw
    # The record of the end: who ended it, where the session went, when
    assert (raw["closed_by"], raw["outcome"], raw["closed_at"], raw["updated_at"]) == (
        "alice",
        "disconnected",
        int(clock()),
        int(clock()),
    )
    assert waits.stopped == [("tok", "h-1")]
    session = store.sessions.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.DISCONNECTED


def test_a_session_closed_already_is_left_as_it_is(store: DynamoSessionStore, waits: Waits) -> None:
    session_id = connected(store)
    store.sessions.update_status(session_id, SessionStatus.DELETED)
    assert disconnect_connection(store, CONN, stop_wait=waits) == "already_closed"
    session = store.sessions.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.DELETED
    assert store.connections.get_connection(CONN) is None


def _before_the_commit(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch, session_id: str, change: str, **values: str
) -> None:
    """One raw UpdateItem of the session's handoff h-1 just before the use case's first commit (a racing writer)."""
    commit = store.table.commit

    def raced(transaction: Any) -> None:
        monkeypatch.setattr(store.table, "commit", commit)
        store.table.client.update_item(
            TableName=store.table.table_name,
            Key={"PK": {"S": f"SESSION#{session_id}"}, "SK": {"S": "HANDOFF#h-1"}},
            UpdateExpression=change,
            ExpressionAttributeValues={f":{name}": {"S": value} for name, value in values.items()},
            **({"ExpressionAttributeNames": {"#s": "status"}} if "#s" in change else {}),
        )
        commit(transaction)

    monkeypatch.setattr(store.table, "commit", raced)


def _waiting(store: DynamoSessionStore) -> str:
    session_id = connected(store)
    store.handoffs.queue_handoff(
        session_id, handoff_id="h-1", reason="billing", priority="normal", execution_arn=None, task_token="tok-1"
    )
    return session_id


def test_a_wait_renewed_while_the_customer_leaves_is_the_one_stopped(
    store: DynamoSessionStore, waits: Waits, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the workflow replaces the wait's token between the leave's read and its write
    session_id = _waiting(store)
    _before_the_commit(store, monkeypatch, session_id, "SET callback_token = :t", t="tok-2")
    # When the customer leaves / Then the abandon is read again, and the live wait is stopped
    assert disconnect_connection(store, CONN, stop_wait=waits) == "disconnected"
    assert waits.stopped == [("tok-2", "h-1")]


def test_an_accept_that_wins_the_race_with_the_customer_leaving_keeps_the_handoff(
    store: DynamoSessionStore, waits: Waits, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an agent's accept lands between the leave's read and its write
    session_id = _waiting(store)
    _before_the_commit(
        store, monkeypatch, session_id, "SET #s = :s, agent_id = :a REMOVE callback_token", s="assigned", a="a-1"
    )
    disconnect_connection(store, CONN, stop_wait=waits)
    # Then the abandon did not overwrite it: no wait stopped, the handoff is the agent's
    raw = store.table.get({"PK": f"SESSION#{session_id}", "SK": "HANDOFF#h-1"})
    assert raw is not None
    assert (raw["status"], raw["agent_id"]) == ("assigned", "a-1")
    assert waits.stopped == []


def test_leaving_while_a_handoff_waits_without_a_token_fails_it_and_stops_nothing(
    store: DynamoSessionStore, waits: Waits
) -> None:
    session_id = connected(store)
    store.handoffs.put_handoff(session_id, reason="billing", handoff_id="h-1")
    assert disconnect_connection(store, CONN, stop_wait=waits) == "disconnected"
    handoff = store.handoffs.get_handoff(session_id, "h-1")
    assert handoff is not None
    assert handoff.status == HandoffStatus.FAILED
    assert waits.stopped == []


def test_deleting_a_session_whose_handoff_waits_records_the_handoff_as_ended_by_the_deletion(
    store: DynamoSessionStore, waits: Waits
) -> None:
    # Given a session whose handoff waits for an agent
    session_id = connected(store)
    store.handoffs.queue_handoff(
        session_id, handoff_id="h-1", reason="billing", priority="normal", execution_arn=None, task_token="tok"
    )
    session = store.sessions.get_session(session_id)
    assert session is not None

    # When it is deleted
    assert delete_during_handoff(store, session, deleted_by="admin-7", stop_wait=waits) is True

    # Then the handoff failed, recorded as the deletion's (not as a disconnect), and its wait stopped
    raw = store.table.get({"PK": f"SESSION#{session_id}", "SK": "HANDOFF#h-1"})
    assert raw is not None
    assert (raw["status"], raw["outcome"], raw["closed_by"], raw["resolution"]) == (
        "failed",
        "deleted",
        "admin-7",
        SESSION_DELETED,
    )
    assert waits.stopped == [("tok", "h-1")]
    deleted = store.sessions.get_session(session_id)
    assert deleted is not None
    assert deleted.status == SessionStatus.DELETED
