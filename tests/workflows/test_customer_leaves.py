"""A customer who disconnects while the handoff still waits for an agent ends it, on the synthesized workflow."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from lambdas.shared import keys
from lambdas.shared.records import Agent, HandoffStatus, SessionStatus
from lambdas.ws.disconnect import CUSTOMER_LEFT_ERROR, CUSTOMER_LEFT_WAITING, disconnect_connection
from tests.workflows.handoff_harness import CONFIG, World, running_world
from tests.workflows.orchestration_harness import REGION, synthesize_orchestration


@pytest.fixture(scope="module")
def templates() -> dict[str, Any]:
    return synthesize_orchestration(CONFIG)


@pytest.fixture
def world(templates: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    with running_world(templates, monkeypatch) as running:
        yield running


def connected(world: World, connection_id: str) -> str:
    """A session with a live connection (as onboarding leaves it); returns its id."""
    session_id = world.session()
    session = world.store.sessions.get_session(session_id)
    assert session is not None
    world.store.connections.put_connection(
        connection_id,
        session_id=session_id,
        customer_id=session.customer_id,
        domain_name="abc123.execute-api.us-east-1.amazonaws.com",
        stage="prod",
    )
    world.store.sessions.set_connection(session_id, connection_id)
    return session_id


def failure_events(execution_arn: str) -> list[dict[str, Any]]:
    history = boto3.client("stepfunctions", region_name=REGION).get_execution_history(
        executionArn=execution_arn, maxResults=1000
    )["events"]
    return [e["taskFailedEventDetails"] for e in history if "taskFailedEventDetails" in e]


def test_a_customer_who_leaves_while_queued_ends_the_handoff_and_a_later_accept_is_409(world: World) -> None:
    # Given a connected customer whose handoff waits for an agent (none is free), offered in the waiting inbox
    session_id = connected(world, "conn-q")
    execution = world.start(session_id, "billing", name="leaves-while-queued")
    world.d.wait_for_state(execution, "WaitForAgent")
    assert world.pump_assignments() == 1
    handoff = world.store.handoffs.current_handoff(session_id)
    assert handoff is not None
    assert handoff.status == HandoffStatus.QUEUED
    assert world.store.inbox.put_inbox_item(
        keys.WAITING_INBOX, session_id=session_id, handoff_id=handoff.handoff_id, reason="billing"
    )

    # When the customer disconnects (before the agent wait times out)
    assert disconnect_connection(world.store, "conn-q") == "disconnected"

    # Then the handoff failed with the reason, the session is disconnected, the inbox is empty
    after = world.store.handoffs.get_handoff(session_id, handoff.handoff_id)
    assert after is not None
    assert after.status == HandoffStatus.FAILED
    raw = world.store.table.get(keys.handoff_key(session_id, handoff.handoff_id))
    assert raw is not None
    assert raw["resolution"] == CUSTOMER_LEFT_WAITING
    assert "callback_token" not in raw
    session = world.store.sessions.get_session(session_id)
    assert session is not None
    assert (session.status, session.connection_id) == (SessionStatus.DISCONNECTED, None)
    assert world.store.inbox.list_inbox("agent-late").items == []
    # And the workflow's wait failed with CustomerLeft, which WaitForAgent's catch-all takes to
    # HandoffFailed (not to the escalation a timeout takes): the execution ends failed, at once
    done = world.d.wait_done(execution, timeout=30)
    assert done["status"] == "FAILED", done
    entered = world.d.states_entered(execution)
    assert "EscalateToManager" not in entered
    assert entered[-3:] == ["HandoffFailed", "NotifyCustomerHandoffFailed", "HandoffAborted"]
    assert CUSTOMER_LEFT_ERROR in {event.get("error") for event in failure_events(execution)}
    after = world.store.handoffs.get_handoff(session_id, handoff.handoff_id)
    assert after is not None
    assert after.status == HandoffStatus.FAILED
    # And an agent who comes online now cannot accept the customer who left
    world.store.agents.put_agent(Agent(agent_id="agent-late", skills=("billing",)))
    accepted = world.route("accept", session_id, "agent-late", {})
    assert accepted["statusCode"] == 409, accepted
    agent = world.store.agents.get_agent("agent-late")
    assert agent is not None
    assert agent.status == "available"
    assert world.store.inbox.list_inbox("agent-late").items == []
    notices = [n for n in world.customer_notices() if n.get("session_id") == session_id]
    assert [n["event_type"] for n in notices] == ["handoff_failed"]


def test_a_disconnect_after_the_agent_took_the_handoff_closes_it_instead(world: World) -> None:
    # Given a waiting handoff an agent accepts first
    session_id = connected(world, "conn-a")
    execution = world.start(session_id, "billing", name="accepted-then-left")
    world.d.wait_for_state(execution, "WaitForAgent")
    assert world.pump_assignments() == 1
    world.agent("agent-fast")
    assert world.route("accept", session_id, "agent-fast", {})["statusCode"] == 200
    world.d.wait_for_state(execution, "MonitorHandoff")
    assert world.store.inbox.put_inbox_item(
        "agent-fast", session_id=session_id, handoff_id="accepted-then-left", reason="x"
    )
    assert [i.inbox for i in world.store.inbox.list_inbox("agent-fast").items] == ["own"]

    # When the customer disconnects
    assert disconnect_connection(world.store, "conn-a") == "disconnected"

    # Then the assigned handoff is completed (the close path), not failed, and the workflow succeeds
    handoff = world.store.handoffs.current_handoff(session_id)
    assert handoff is not None
    assert handoff.status == HandoffStatus.COMPLETED
    assert world.store.inbox.list_inbox("agent-fast").items == []
    world.time_passes(CONFIG.handoff_idle_seconds)  # the workflow's next step: the idle limit
    assert world.d.wait_done(execution, timeout=60)["status"] == "SUCCEEDED"
