"""A handoff's whole life on the synthesized workflow: current whatever its id, closed, access ending with it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from embedded.events import lambda_context
from lambdas.orchestration import handoff
from lambdas.shared import env as lambda_env
from lambdas.shared import keys
from lambdas.shared.records import AgentStatus, HandoffStatus, SessionStatus
from lambdas.ws.disconnect import disconnect_connection
from tests.workflows.handoff_harness import CONFIG, World, running_world
from tests.workflows.orchestration_harness import synthesize_orchestration


@pytest.fixture(scope="module")
def templates() -> dict[str, Any]:
    return synthesize_orchestration(CONFIG)


@pytest.fixture
def world(templates: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    with running_world(templates, monkeypatch) as running:
        yield running


# ---------------------------------------------------------------------- a handoff's whole life

RESUME = {"resolution": "Refunded the duplicate charge.", "outcome": "resume"}


def _body(response: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(response["body"])
    return body


def _accepted_by(world: World, session_id: str, name: str, agent_id: str, skill: str) -> str:
    """Start a handoff named ``name`` that waits for an agent, and let ``agent_id`` accept it."""
    execution = world.start(session_id, skill, name=name)
    world.d.wait_for_state(execution, "WaitForAgent")
    assert world.pump_assignments() == 1
    world.agent(agent_id, skill)
    world.store.inbox.put_inbox_item(keys.WAITING_INBOX, session_id=session_id, handoff_id=name, reason=skill)
    queued = world.store.handoffs.get_handoff(session_id, name)
    assert queued is not None
    waiting_key = keys.inbox_item_key(keys.WAITING_INBOX, name, priority="normal", waiting_since=queued.created_at)
    assert world.store.table.get(waiting_key) is not None
    accepted = world.route("accept", session_id, agent_id, {})
    assert accepted["statusCode"] == 200, accepted
    assert _body(accepted)["handoff_id"] == name
    # and the shared waiting inbox no longer offers it to other consoles
    assert world.store.table.get(waiting_key) is None
    world.d.wait_for_state(execution, "MonitorHandoff")
    world.waiting_for_reply(session_id, name)
    return execution


def test_later_handoffs_reach_their_agents_whatever_their_ids_sort_like(world: World) -> None:
    # Given a session whose handoffs are named so that alphabetical order is the reverse of time order
    session_id = world.session()
    served: list[str] = []
    # (each with its own reason, so that no earlier agent is free for a later one)
    rounds = (
        ("handoff-c", "agent-c", "billing"),
        ("handoff-b", "agent-b", "shipping"),
        ("handoff-a", "agent-a", "returns"),
    )
    for name, agent_id, skill in rounds:
        # When each handoff is accepted by its agent, who reads, replies and closes it
        execution = _accepted_by(world, session_id, name, agent_id, skill)
        assert world.read_turns(session_id, agent_id) == 200
        reply = world.route("messages", session_id, agent_id, {"text": f"Hello from {agent_id}"})
        assert reply["statusCode"] == 201, reply
        closed = world.route("close", session_id, agent_id, RESUME)
        assert closed["statusCode"] == 200, closed
        assert world.d.wait_done(execution)["status"] == "SUCCEEDED"
        # Then the current handoff is this one; its agent's access ended with it (403), and
        # the agents of earlier handoffs are strangers to the session again (404)
        current = world.store.handoffs.current_handoff(session_id)
        assert current is not None
        assert (current.handoff_id, current.status) == (name, HandoffStatus.COMPLETED)
        assert world.read_turns(session_id, agent_id) == 403
        for previous in served:
            assert world.read_turns(session_id, previous) == 404
        served.append(agent_id)
        agent = world.store.agents.get_agent(agent_id)
        assert agent is not None
        assert agent.status == AgentStatus.AVAILABLE
        session = world.store.sessions.get_session(session_id)
        assert session is not None
        assert session.status == SessionStatus.ACTIVE


def test_closing_before_the_first_reply_finishes_the_execution_and_a_second_close_is_409(world: World) -> None:
    # Given a handoff whose agent has not replied yet (MonitorHandoff waits)
    session_id = world.session()
    world.agent("agent-9")
    execution = world.start(session_id)
    world.d.wait_for_state(execution, "MonitorHandoff")
    handoff_id = execution.rsplit(":", 1)[-1]
    world.waiting_for_reply(session_id, handoff_id)

    world.store.inbox.put_inbox_item("agent-9", session_id=session_id, handoff_id=handoff_id, reason="billing")

    # When the agent closes it, handing the session back to the assistant
    closed = world.route("close", session_id, "agent-9", RESUME)
    done = world.d.wait_done(execution)

    # Then the execution finished successfully (not by timeout), and everything is released
    assert closed["statusCode"] == 200, closed
    assert _body(closed)["session_status"] == "active"
    assert _body(closed)["released_agent_id"] == "agent-9"
    assert done["status"] == "SUCCEEDED", done
    states = world.d.states_entered(execution)
    assert states[-1] == "HandoffComplete"
    assert "ReassignAgent" not in states
    item = world.store.table.get({"PK": f"SESSION#{session_id}", "SK": f"HANDOFF#{_body(closed)['handoff_id']}"})
    assert item is not None
    assert (item["status"], item["resolution"], item["closed_by"]) == ("completed", RESUME["resolution"], "agent-9")
    agent = world.store.agents.get_agent("agent-9")
    assert agent is not None
    assert agent.status == AgentStatus.AVAILABLE
    assert world.store.table.get(keys.agent_inbox_key("agent-9", handoff_id)) is None  # out of the agent's inbox
    # and the customer's messages go to the assistant again
    session = world.store.sessions.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.ACTIVE
    # When it is closed again, by its agent or an admin
    again = world.route("close", session_id, "agent-9", {"resolution": "again", "outcome": "end"})
    by_admin = world.route("close", session_id, "admin-1", {"resolution": "again", "outcome": "end"}, role="admin")
    # Then 409 and nothing changed
    assert (again["statusCode"], by_admin["statusCode"]) == (409, 409)
    assert world.store.table.get({"PK": f"SESSION#{session_id}", "SK": item["SK"]}) == item
    after = world.store.sessions.get_session(session_id)
    assert after is not None
    assert after.status == SessionStatus.ACTIVE
    # and the agent's access ended with the handoff
    assert world.read_turns(session_id, "agent-9") == 403
    assert world.route("messages", session_id, "agent-9", {"text": "still here?"})["statusCode"] == 403


def test_an_admin_closes_a_handoff_and_ends_the_session(world: World) -> None:
    # Given a handoff in progress
    session_id = world.session()
    world.agent("agent-10")
    execution = world.start(session_id)
    world.d.wait_for_state(execution, "MonitorHandoff")
    world.waiting_for_reply(session_id, execution.rsplit(":", 1)[-1])

    # When an admin closes it and ends the session (a stranger agent may not)
    stranger = world.route("close", session_id, "agent-11", {"resolution": "mine", "outcome": "end"})
    bad = world.route("close", session_id, "admin-1", {"resolution": "x", "outcome": "later"}, role="admin")
    closed = world.route("close", session_id, "admin-1", {"resolution": "Fraud: ended", "outcome": "end"}, role="admin")

    # Then the session ended (waiting for cleanup), the agent is free, the execution succeeded
    assert (stranger["statusCode"], bad["statusCode"]) == (403, 400)
    assert closed["statusCode"] == 200, closed
    assert world.d.wait_done(execution)["status"] == "SUCCEEDED"
    session = world.store.sessions.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.DISCONNECTED
    assert session.cleanup_at is not None
    agent = world.store.agents.get_agent("agent-10")
    assert agent is not None
    assert agent.status == AgentStatus.AVAILABLE


def test_a_reassigned_agent_loses_access_and_only_the_next_agent_is_in(world: World) -> None:
    # Given an agent who stays idle, and a second agent who comes online meanwhile
    session_id = world.session()
    world.agent("agent-idle")
    execution = world.start(session_id)
    world.d.wait_for_state(execution, "MonitorHandoff")
    assert world.read_turns(session_id, "agent-idle") == 200
    world.agent("agent-next")

    # When the idle timeout reassigns the handoff to the next agent
    world.time_passes(CONFIG.handoff_idle_seconds)
    world.d.wait_for_state(execution, "ReassignAgent", timeout=30)
    world.wait_until(
        lambda: world.d.states_entered(execution).count("MonitorHandoff") >= 2, "MonitorHandoff entered again"
    )
    world.waiting_for_reply(session_id, execution.rsplit(":", 1)[-1])

    # Then the idle agent gets 403 on the session's turns and messages; the next agent is the only one in
    assert world.read_turns(session_id, "agent-idle") == 403
    assert world.route("messages", session_id, "agent-idle", {"text": "sorry"})["statusCode"] == 403
    assert world.read_turns(session_id, "agent-next") == 200
    assert world.route("messages", session_id, "agent-next", {"text": "I am here"})["statusCode"] == 201
    assert world.route("close", session_id, "agent-next", RESUME)["statusCode"] == 200
    assert world.d.wait_done(execution)["status"] == "SUCCEEDED"


def test_a_customer_who_disconnects_during_a_handoff_ends_it(world: World) -> None:
    # Given a connected customer handed to an agent who has not replied yet
    session_id = world.session()
    world.store.connections.put_connection(
        "conn-9",
        session_id=session_id,
        customer_id="customer-x",
        domain_name="abc123.execute-api.us-east-1.amazonaws.com",
        stage="prod",
    )
    world.store.sessions.set_connection(session_id, "conn-9")
    world.agent("agent-12")
    execution = world.start(session_id)
    world.d.wait_for_state(execution, "MonitorHandoff")

    # When the customer disconnects
    assert disconnect_connection(world.store, "conn-9") == "disconnected"

    # Then the handoff is completed, the agent released, the session disconnected, and the
    # workflow finds the handoff closed at its next step and succeeds
    handoff = world.store.handoffs.current_handoff(session_id)
    assert handoff is not None
    assert handoff.status == HandoffStatus.COMPLETED
    agent = world.store.agents.get_agent("agent-12")
    assert agent is not None
    assert agent.status == AgentStatus.AVAILABLE
    session = world.store.sessions.get_session(session_id)
    assert session is not None
    assert (session.status, session.connection_id) == (SessionStatus.DISCONNECTED, None)
    world.time_passes(CONFIG.handoff_idle_seconds)  # the workflow's next step: the idle limit
    done = world.d.wait_done(execution, timeout=60)
    assert done["status"] == "SUCCEEDED", done
    assert world.d.states_entered(execution)[-2:] == ["HandoffClosedMeanwhile", "HandoffComplete"]
    assert world.read_turns(session_id, "agent-12") == 403


def test_an_agent_of_a_failed_handoff_loses_access(world: World) -> None:
    # Given a handoff an agent was assigned to
    session_id = world.session()
    world.agent("agent-failed")
    execution = world.start(session_id)
    world.d.wait_for_state(execution, "MonitorHandoff")
    assert world.read_turns(session_id, "agent-failed") == 200
    current = world.store.handoffs.current_handoff(session_id)
    assert current is not None

    # When the workflow's HandoffFailed step ends it
    lambda_env.reset()
    failed = handoff.fail(
        {"state": {"session_id": session_id, "agent": {"agent_id": "agent-failed"}}, "handoff_id": current.handoff_id},
        lambda_context(),
    )

    # Then the agent is released and gets 403 on the session's turns and messages
    assert failed["released"] is True
    after = world.store.handoffs.current_handoff(session_id)
    assert after is not None
    assert after.status == HandoffStatus.FAILED
    assert world.read_turns(session_id, "agent-failed") == 403
    assert world.route("messages", session_id, "agent-failed", {"text": "still there?"})["statusCode"] == 403
