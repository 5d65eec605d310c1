"""lambdas.api.agent: what an accept tells the workflow, and an escalated handoff that only a manager takes."""

from __future__ import annotations

import pytest

from lambdas.api import agent as agent_api
from lambdas.shared import keys
from lambdas.shared.records import Agent, AgentStatus, HandoffStatus
from lambdas.shared.store import DynamoSessionStore
from lambdas.shared.store.inbox import Placement
from tests.unit.api.test_agent import DEAD_TOKEN, RecordingWorkflow, call, queued, store

__all__ = ["store"]  # the fixture, shared with the route tests


def _escalated(store: DynamoSessionStore) -> str:
    """A billing handoff nobody took in time: escalated, waiting for a manager, in the managers' inbox."""
    session_id = queued(store)
    store.handoffs.update_handoff(
        session_id, "h-1", status=HandoffStatus.ESCALATED, expected_status=HandoffStatus.QUEUED
    )
    store.handoffs.await_callback(session_id, "h-1", "agent", "manager-token")
    _list(store, session_id, keys.MANAGERS_INBOX)
    return session_id


def _list(store: DynamoSessionStore, session_id: str, inbox: str) -> None:
    """Put the handoff in a shared ``inbox``, as the stream's projection does."""
    assert store.inbox.put_inbox_item(inbox, session_id=session_id, handoff_id="h-1", reason="billing")


def _listed(store: DynamoSessionStore, session_id: str, inbox: str) -> bool:
    """Whether ``inbox`` holds the handoff's item (read raw: a console's listing leaves stale items out)."""
    handoff = store.table.get(keys.handoff_key(session_id, "h-1"))
    assert handoff is not None
    return store.table.get(Placement.of(handoff).key(inbox)) is not None


def test_an_escalated_handoff_refuses_an_agent_who_is_no_manager_and_a_manager_takes_it(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an escalated billing handoff, an agent with the billing skill, and a manager without it
    session_id = _escalated(store)
    store.agents.put_agent(Agent(agent_id="agent-1", skills=("billing",)))
    store.agents.put_agent(Agent(agent_id="boss-1", skills=("shipping",), is_manager=True))
    workflow = RecordingWorkflow()
    monkeypatch.setattr(agent_api, "sfn", workflow)

    # When the agent tries to take it, then the manager
    refused = call("accept", session_id, {}, sub="agent-1")
    taken = call("accept", session_id, {}, sub="boss-1")

    # Then the agent is refused and stays free, the workflow heard only of the manager, who has it
    assert refused[0] == 409
    assert "waits for a manager" in refused[1]["error"]["message"]
    agent = store.agents.get_agent("agent-1")
    assert agent is not None
    assert agent.status == AgentStatus.AVAILABLE
    assert taken == (200, {"session_id": session_id, "handoff_id": "h-1", "agent_id": "boss-1", "status": "accepted"})
    assert workflow.outputs == [("manager-token", {"available": True, "agent_id": "boss-1", "source": "accepted"})]
    # And the managers' inbox no longer offers it
    assert not _listed(store, session_id, keys.MANAGERS_INBOX)


def test_an_accepted_handoff_tells_the_workflow_who_took_it(
    store: DynamoSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a queued handoff waiting on its task token, in the waiting inbox, and an available agent with the skill
    session_id = queued(store)
    _list(store, session_id, keys.WAITING_INBOX)
    store.agents.put_agent(Agent(agent_id="agent-1", skills=("billing",)))
    workflow = RecordingWorkflow()
    monkeypatch.setattr(agent_api, "sfn", workflow)

    # When the agent accepts
    status, _ = call("accept", session_id, {})

    # Then the waiting task gets exactly the agent and how it came (the workflow's AssignAgent reads it)
    assert status == 200
    assert workflow.outputs == [(DEAD_TOKEN, {"available": True, "agent_id": "agent-1", "source": "accepted"})]
    assert store.handoffs.waiting_for(session_id, "h-1") is None
    # And no other console offers it any more
    assert not _listed(store, session_id, keys.WAITING_INBOX)
