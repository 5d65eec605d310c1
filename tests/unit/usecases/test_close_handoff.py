"""lambdas.usecases.close_handoff: the handoff completed, its agent released and the session moved at once, on moto."""

from __future__ import annotations

from typing import Any

import pytest

from embedded.round_trips import RoundTrips
from lambdas.shared import keys
from lambdas.shared.errors import Conflict, HandoffNotFound, InvalidInput, NotTheAssignedAgent
from lambdas.shared.records import Agent, AgentStatus, HandoffStatus, SessionStatus
from lambdas.shared.store import DynamoSessionStore, HandoffClosed
from lambdas.shared.store.inbox import Placement
from lambdas.usecases.assign_agent import begin_handoff
from lambdas.usecases.close_handoff import close_handoff


def handed_over(store: DynamoSessionStore, agent_id: str = "agent-1") -> str:
    """An active session handed to a reserved agent (as the workflow leaves it); returns the session id."""
    session_id = store.sessions.create_session("customer-1").session_id
    store.agents.put_agent(Agent(agent_id=agent_id, skills=("billing",), status=AgentStatus.AVAILABLE))
    store.agents.reserve_agent(agent_id, session_id)
    begin_handoff(
        store,
        session_id,
        handoff_id="h-1",
        agent_id=agent_id,
        reason="billing",
        priority="normal",
        execution_arn=None,
        system_text="handed over",
    )
    return session_id


def close(store: DynamoSessionStore, session_id: str, **options: Any) -> Any:
    arguments: dict[str, Any] = {"closed_by": "agent-1", "resolution": "done", "outcome": SessionStatus.ACTIVE}
    return close_handoff(store, session_id, "h-1", **{**arguments, **options})


def test_a_close_completes_the_handoff_releases_the_agent_and_resumes_the_session_in_one_write(
    store: DynamoSessionStore,
) -> None:
    # Given a session handed over to agent-1, listed in its inbox (the stream's projection puts it there)
    session_id = handed_over(store)
    store.inbox.put_inbox_item("agent-1", session_id=session_id, handoff_id="h-1", reason="billing")
    listed = Placement.of(store.table.get(keys.handoff_key(session_id, "h-1")) or {}).key("agent-1")
    assert store.table.get(listed) is not None
    # When agent-1 closes it
    with RoundTrips(store.table.client) as trips:
        closed = close(store, session_id)
    # Then three reads (the handoff, the agent, its presence) and one transaction did it all
    assert trips.operations() == ["GetItem", "GetItem", "GetItem", "TransactWriteItems"]
    assert (closed.handoff.status, closed.session_status, closed.released_agent_id) == (
        HandoffStatus.COMPLETED,
        SessionStatus.ACTIVE,
        "agent-1",
    )
    session = store.sessions.get_session(session_id)
    agent = store.agents.get_agent("agent-1")
    assert session is not None
    assert session.status == SessionStatus.ACTIVE
    assert agent is not None
    assert agent.status == AgentStatus.AVAILABLE
    # And the record says who closed it, how and when, for the audit trail
    record = store.table.get(keys.handoff_key(session_id, "h-1"))
    assert record is not None
    now = store.table.now()
    assert {k: record.get(k) for k in ("resolution", "outcome", "closed_by", "closed_at", "updated_at")} == {
        "resolution": "done",
        "outcome": "active",
        "closed_by": "agent-1",
        "closed_at": now,
        "updated_at": now,
    }
    # And the agent's inbox no longer holds it
    assert store.table.get(listed) is None


def test_a_close_racing_a_failure_leaves_the_handoff_failed(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a handoff the workflow fails between the close's read and its write (its agent stays on it)
    session_id = handed_over(store)
    read = store.handoffs.get_handoff

    def read_then_fail(sid: str, handoff_id: str) -> Any:
        handoff = read(sid, handoff_id)
        monkeypatch.setattr(store.handoffs, "get_handoff", read)
        store.handoffs.update_handoff(
            sid, handoff_id, status=HandoffStatus.FAILED, expected_status=HandoffStatus.ASSIGNED
        )
        return handoff

    monkeypatch.setattr(store.handoffs, "get_handoff", read_then_fail)
    # When the agent's close writes
    with pytest.raises(HandoffClosed):
        close(store, session_id)
    # Then the failure stands: the close wrote nothing, not even its resolution
    raw = store.table.get(keys.handoff_key(session_id, "h-1"))
    assert raw is not None
    assert raw["status"] == str(HandoffStatus.FAILED)
    assert "resolution" not in raw
    session = store.sessions.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.HANDOFF


def test_a_second_close_is_refused_and_changes_nothing(store: DynamoSessionStore) -> None:
    session_id = handed_over(store)
    close(store, session_id, resolution="first")
    with pytest.raises(HandoffClosed):
        close(store, session_id, resolution="second", outcome=SessionStatus.DISCONNECTED)
    raw = store.table.get(keys.handoff_key(session_id, "h-1"))
    assert raw is not None
    assert raw["resolution"] == "first"


def test_a_session_that_left_the_handoff_refuses_the_close(store: DynamoSessionStore) -> None:
    # Given a session that points at another handoff now
    session_id = handed_over(store)
    store.handoffs.put_handoff(session_id, reason="billing", handoff_id="h-2")
    # When h-1 is closed / Then nothing changes
    with pytest.raises(HandoffClosed):
        close(store, session_id)
    handoff = store.handoffs.get_handoff(session_id, "h-1")
    assert handoff is not None
    assert handoff.status == HandoffStatus.ASSIGNED


def test_a_close_whose_agent_serves_another_session_releases_no_one(store: DynamoSessionStore) -> None:
    session_id = handed_over(store)
    store.agents.release_agent("agent-1", session_id=session_id)
    other = store.sessions.create_session("customer-2").session_id
    store.agents.reserve_agent("agent-1", other)
    closed = close(store, session_id)
    assert closed.released_agent_id is None
    agent = store.agents.get_agent("agent-1")
    assert agent is not None
    assert (agent.status, agent.current_session_id) == (AgentStatus.BUSY, other)


def test_an_agent_that_keeps_changing_is_a_conflict_after_three_reads(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an agent record whose revision moves after every read
    session_id = handed_over(store)
    read = store.agents.get_agent
    reads: list[str] = []

    def read_then_touch(agent_id: str) -> Any:
        agent = read(agent_id)
        reads.append(agent_id)
        store.table.client.update_item(  # a concurrent writer moves the revision
            TableName=store.table.table_name,
            Key={"PK": {"S": f"AGENT#{agent_id}"}, "SK": {"S": "META"}},
            UpdateExpression="SET #r = :r",
            ExpressionAttributeNames={"#r": "revision"},
            ExpressionAttributeValues={":r": {"S": f"moved-{len(reads)}"}},
        )
        return agent

    monkeypatch.setattr(store.agents, "get_agent", read_then_touch)
    with pytest.raises(Conflict, match="kept changing"):
        close(store, session_id)
    assert len(reads) == 3


def test_a_missing_handoff_is_not_found(store: DynamoSessionStore) -> None:
    session_id = store.sessions.create_session("customer-1").session_id
    with pytest.raises(HandoffNotFound):
        close(store, session_id)


@pytest.mark.parametrize(
    "options",
    [{"outcome": "handoff"}, {"resolution": " "}, {"resolution": "x" * 1001}, {"closed_by": ""}],
)
def test_fails_on_an_outcome_resolution_or_closer_it_cannot_write(
    store: DynamoSessionStore, options: dict[str, Any]
) -> None:
    with pytest.raises(InvalidInput):
        close(store, "s-1", **options)


def test_a_resolution_of_exactly_1000_characters_is_written(store: DynamoSessionStore) -> None:
    session_id = handed_over(store)
    close(store, session_id, resolution="x" * 1000)
    raw = store.table.get(keys.handoff_key(session_id, "h-1"))
    assert raw is not None
    assert len(raw["resolution"]) == 1000


def test_an_agents_close_of_a_handoff_reassigned_since_it_was_authorised_is_refused(store: DynamoSessionStore) -> None:
    # Given agent-1's handoff, requeued and given to agent-2 after agent-1's close was authorised
    session_id = handed_over(store)
    store.agents.put_agent(Agent(agent_id="agent-2", skills=("billing",), status=AgentStatus.BUSY))
    store.handoffs.update_handoff(session_id, "h-1", agent_id="agent-2")
    # When agent-1's close reaches the store / Then it is not done in agent-1's name
    with pytest.raises(NotTheAssignedAgent):
        close(store, session_id, assigned_to="agent-1")
    handoff = store.handoffs.get_handoff(session_id, "h-1")
    assert handoff is not None
    assert (handoff.status, handoff.agent_id) == (HandoffStatus.ASSIGNED, "agent-2")
    # And agent-2 (or an admin, who names no agent) still can
    assert (
        close(store, session_id, closed_by="agent-2", assigned_to="agent-2").handoff.status == HandoffStatus.COMPLETED
    )
