"""Priority on the synthesized handoff workflow: a freed agent gets the urgent customer, not the newer normal one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from lambdas.shared import keys
from lambdas.shared.records import AgentStatus, HandoffStatus
from stacks.config import with_overrides
from tests.workflows.handoff_harness import CONFIG, World, running_world
from tests.workflows.orchestration_harness import synthesize_orchestration

#: Waits long enough that nobody escalates or is reassigned while the test runs, however slow the machine.
PATIENT = with_overrides(
    CONFIG, handoff_agent_wait_seconds=600, handoff_manager_wait_seconds=600, handoff_idle_seconds=600
)
RESUME = {"resolution": "Answered.", "outcome": "resume"}


@pytest.fixture(scope="module")
def templates() -> dict[str, Any]:
    return synthesize_orchestration(PATIENT)


@pytest.fixture
def world(templates: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    with running_world(templates, monkeypatch) as running:
        yield running


def _queue(world: World, session_id: str, priority: str) -> tuple[str, str]:
    """Start a handoff that finds no agent, let it queue, and put it in the waiting inbox: (execution, handoff id)."""
    execution = world.start(session_id, priority=priority)
    handoff_id = execution.rsplit(":", 1)[-1]
    world.d.wait_for_state(execution, "WaitForAgent")
    assert world.pump_assignments() == 1
    world.wait_until(lambda: world.store.handoffs.waiting_for(session_id, handoff_id) == "agent", "queued with token")
    assert world.store.inbox.put_inbox_item(
        keys.WAITING_INBOX, session_id=session_id, handoff_id=handoff_id, reason="billing"
    )
    return execution, handoff_id


def test_a_freed_agent_is_offered_and_takes_the_urgent_customer_and_a_newer_normal_one_queues(world: World) -> None:
    # Given the only billing agent serving a customer
    world.agent("agent-1")
    served = world.session()
    first = world.start(served)
    world.d.wait_for_state(first, "MonitorHandoff")
    world.waiting_for_reply(served, first.rsplit(":", 1)[-1])
    # and an urgent customer queued while the agent is busy
    urgent_session = world.session()
    urgent, urgent_id = _queue(world, urgent_session, "urgent")

    # When the agent frees up and only then a normal customer asks
    closed = world.route("close", served, "agent-1", RESUME)
    assert closed["statusCode"] == 200, closed
    assert json.loads(closed["body"])["released_agent_id"] == "agent-1"
    normal_session = world.session()
    normal, normal_id = _queue(world, normal_session, "normal")

    # Then the workflow's agent check did not give the free agent to the newer normal customer
    check = world.d.states_entered(normal)
    assert check.count("CheckAgentAvailability") == 1
    assert "UpdateDynamoDB" not in check
    agent = world.store.agents.get_agent("agent-1")
    assert agent is not None
    assert agent.status == AgentStatus.AVAILABLE
    # and the agent's console lists the urgent one first and offers it
    inbox = world.read_inbox("agent-1")
    assert [(i["handoff_id"], i["priority"]) for i in inbox["items"]] == [(urgent_id, "urgent"), (normal_id, "normal")]
    assert inbox["next"]["handoff_id"] == urgent_id
    assert inbox["next"]["waiting_seconds"] >= 0

    # When the agent takes what it is offered
    accepted = world.route("accept", inbox["next"]["session_id"], "agent-1", {})
    assert accepted["statusCode"] == 200, accepted

    # Then the urgent customer is handed to it, and the normal one still waits for the next free agent
    world.d.wait_for_state(urgent, "MonitorHandoff")
    taken = world.store.handoffs.get_handoff(urgent_session, urgent_id)
    assert taken is not None
    assert (taken.status, taken.agent_id, taken.priority) == (HandoffStatus.ASSIGNED, "agent-1", "urgent")
    waiting = world.store.handoffs.get_handoff(normal_session, normal_id)
    assert waiting is not None
    assert waiting.status == HandoffStatus.QUEUED
    assert "WaitForAgent" in world.d.states_entered(normal)
    assert [i["handoff_id"] for i in world.read_inbox("agent-1")["items"] if i["inbox"] == "waiting"] == [normal_id]
