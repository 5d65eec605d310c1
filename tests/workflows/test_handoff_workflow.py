"""The handoff state machine, as synthesized, executed on moto with its Lambdas in-process.

Timeouts come from a test StageConfig (4 s agent wait, 3 s idle, 1 reassignment) on a frozen
clock: each fires where a case lets its time pass (``World.time_passes``), never because the
machine was slow. The agent routes (``lambdas.api.agent``) are driven with API Gateway
events carrying the authorizer context, exactly as the REST API would call them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from lambdas.orchestration import handoff as handoff_steps
from lambdas.shared.records import AgentStatus, HandoffStatus, Role, SessionStatus
from lambdas.shared.store import DynamoSessionStore
from tests.workflows import handoff_harness
from tests.workflows.handoff_harness import CONFIG, World, running_world
from tests.workflows.orchestration_harness import synthesize_orchestration


@pytest.fixture(scope="module")
def templates() -> dict[str, Any]:
    return synthesize_orchestration(CONFIG)


@pytest.fixture
def world(templates: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    with running_world(templates, monkeypatch) as running:
        yield running


def _cause(description: dict[str, Any]) -> str:
    return str(description.get("cause", ""))


def _first(monkeypatch: pytest.MonkeyPatch, step: str, action: Callable[[dict[str, Any]], None]) -> None:
    """Make the workflow's ``step`` run ``action`` with its event before the step itself does."""
    original = getattr(handoff_steps, step)

    def step_after_action(event: dict[str, Any], context: Any) -> dict[str, Any]:
        action(event)
        result: dict[str, Any] = original(event, context)
        return result

    monkeypatch.setattr(handoff_steps, step, step_after_action)


# ---------------------------------------------------------------------- cases


def test_agent_free_hands_over_and_watches_the_agent_after_the_first_reply(world: World) -> None:
    # Given a session with two turns and one available billing agent
    session_id = world.session()
    world.agent("agent-1")

    # When the handoff starts, and the agent answers once MonitorHandoff waits
    execution = world.start(session_id)
    world.d.wait_for_state(execution, "MonitorHandoff")
    handoff_id = execution.rsplit(":", 1)[-1]
    world.waiting_for_reply(session_id, handoff_id)
    reply = world.route("messages", session_id, "agent-1", {"text": "Hi, I am Ana from billing."})

    # Then the execution went along the happy path and now watches the agent's next message
    assert reply["statusCode"] == 201, reply
    world.d.wait_for_state(execution, "WatchAgent")
    world.waiting_for_reply(session_id, handoff_id)
    states = world.d.states_entered(execution)
    assert states[:6] == [
        "ValidateSession",
        "CheckSessionActive",
        "CheckAgentAvailability",
        "IsAgentAvailable",
        "AssignAgent",
        "UpdateDynamoDB",
    ]
    assert states[-3:] == ["FirstReplyOrClose", "StartWatchingAgent", "WatchAgent"]
    assert "WaitForAgent" not in states
    # and the transaction wrote all three items: session in handoff, record assigned, system turn 3
    session = world.store.sessions.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.HANDOFF
    handoff = world.store.handoffs.current_handoff(session_id)
    assert handoff is not None
    assert handoff.status == HandoffStatus.ASSIGNED
    assert handoff.agent_id == "agent-1"
    turns = world.store.turns.list_turns(session_id).items
    assert [(t.turn_number, t.role) for t in turns] == [
        (1, Role.USER),
        (2, Role.USER),
        (3, Role.SYSTEM),
        (4, Role.AGENT),
    ]
    # and the customer heard "handoff_started" exactly once, from the workflow
    notices = world.customer_notices()
    assert [n["event_type"] for n in notices] == ["handoff_started"]
    assert notices[0]["session_id"] == session_id
    assert notices[0]["text"]
    agent = world.store.agents.get_agent("agent-1")
    assert agent is not None
    assert agent.status == AgentStatus.BUSY
    assert agent.current_session_id == session_id
    # When the agent closes it / Then the execution ends at once
    closed = world.route("close", session_id, "agent-1", {"resolution": "answered", "outcome": "resume"})
    assert closed["statusCode"] == 200, closed
    done = world.d.wait_done(execution)
    assert done["status"] == "SUCCEEDED", done
    assert world.d.states_entered(execution)[-2:] == ["MessageOrClose", "HandoffComplete"]


def test_a_first_reply_sent_before_monitor_handoff_waits_is_heard_and_no_idle_limit_runs(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an agent whose console greets the customer as soon as the handoff is assigned, before
    # MonitorHandoff stored its token (here: while TransferConversationContext runs)
    session_id = world.session()
    world.agent("agent-2")
    greetings: list[dict[str, Any]] = []

    def greet(event: dict[str, Any]) -> None:
        assert world.store.handoffs.waiting_for(event["session_id"], event["handoff_id"]) is None
        greetings.append(world.route("messages", event["session_id"], "agent-2", {"text": "Hello, Ana here."}))

    _first(monkeypatch, "transfer_context", greet)

    # When the handoff starts
    execution = world.start(session_id)

    # Then the reply was stored and the workflow heard it: WatchAgent waits, no time had to pass
    world.d.wait_for_state(execution, "WatchAgent")
    handoff_id = execution.rsplit(":", 1)[-1]
    world.waiting_for_reply(session_id, handoff_id)
    assert [g["statusCode"] for g in greetings] == [201], greetings
    states = world.d.states_entered(execution)
    assert states[-4:] == ["MonitorHandoff", "FirstReplyOrClose", "StartWatchingAgent", "WatchAgent"]
    assert "ReassignAgent" not in states
    handoff = world.store.handoffs.current_handoff(session_id)
    assert handoff is not None
    assert (handoff.status, handoff.agent_id) == (HandoffStatus.ASSIGNED, "agent-2")

    # When a message comes between two of WatchAgent's waits (before the next one stores its token)
    def write_again(event: dict[str, Any]) -> None:
        if event.get("expected_version") == 2:
            world.route("messages", event["session_id"], "agent-2", {"text": "Still here."})

    _first(monkeypatch, "await_reply", write_again)
    assert world.route("messages", session_id, "agent-2", {"text": "Let me look."})["statusCode"] == 201
    # Then the wait that began after it ends itself with its version, and the next one waits at 3
    world.wait_until(
        lambda: world.d.states_entered(execution).count("WatchAgent") == 3,
        "WatchAgent entered after each of three messages",
    )
    world.waiting_for_reply(session_id, handoff_id)
    assert [t.role for t in world.store.turns.list_turns(session_id).items][-3:] == [Role.AGENT] * 3
    # When the agent closes it / Then the execution ends at once, never having looked for another agent
    closed = world.route("close", session_id, "agent-2", {"resolution": "answered", "outcome": "resume"})
    assert closed["statusCode"] == 200, closed
    done = world.d.wait_done(execution)
    assert done["status"] == "SUCCEEDED", done
    assert "FindReplacementAgent" not in world.d.states_entered(execution)


def test_a_first_reply_counted_as_the_idle_limit_fires_keeps_the_agent(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an agent whose first message is counted just as MonitorHandoff's idle limit fires (the
    # message route counts the activity before it looks for the token, and ReassignAgent runs first)
    session_id = world.session()
    world.agent("agent-3")
    _first(
        monkeypatch,
        "reassign",
        lambda event: world.store.handoffs.record_activity(
            event["state"]["session_id"], event["handoff_id"], "agent-3"
        ),
    )
    execution = world.start(session_id)
    world.d.wait_for_state(execution, "MonitorHandoff")
    handoff_id = execution.rsplit(":", 1)[-1]
    world.waiting_for_reply(session_id, handoff_id)

    # When the idle limit passes
    world.time_passes(CONFIG.handoff_idle_seconds)

    # Then the agent keeps the handoff and the workflow watches it from that reply on
    world.d.wait_for_state(execution, "WatchAgent")
    world.waiting_for_reply(session_id, handoff_id)
    states = world.d.states_entered(execution)
    assert states[-4:] == ["ReassignAgent", "HandoffClosedMeanwhile", "AgentRepliedMeanwhile", "WatchAgent"]
    assert states.count("CheckAgentAvailability") == 1
    handoff = world.store.handoffs.current_handoff(session_id)
    assert handoff is not None
    assert (handoff.status, handoff.agent_id) == (HandoffStatus.ASSIGNED, "agent-3")
    agent = world.store.agents.get_agent("agent-3")
    assert agent is not None
    assert (agent.status, agent.current_session_id) == (AgentStatus.BUSY, session_id)
    closed = world.route("close", session_id, "agent-3", {"resolution": "answered", "outcome": "resume"})
    assert closed["statusCode"] == 200, closed
    assert world.d.wait_done(execution)["status"] == "SUCCEEDED"


def test_no_agent_waits_then_accepting_agent_from_authorizer_context_takes_it(world: World) -> None:
    # Given a session and no available agent yet
    session_id = world.session()
    execution = world.start(session_id)
    world.d.wait_for_state(execution, "WaitForAgent")
    assert world.pump_assignments() == 1
    # and an agent who comes online
    world.agent("agent-2")

    # When the agent accepts (the body's agent_id is ignored: the authorizer says agent-2)
    accepted = world.route("accept", session_id, "agent-2", {"agent_id": "someone-else"})
    world.d.wait_for_state(execution, "MonitorHandoff")
    world.waiting_for_reply(session_id, execution.rsplit(":", 1)[-1])
    world.route("messages", session_id, "agent-2", {"text": "Hello!"})
    world.route("close", session_id, "agent-2", {"resolution": "answered", "outcome": "resume"})
    done = world.d.wait_done(execution)

    # Then the handoff went through WaitForAgent to the accepting agent
    assert accepted["statusCode"] == 200, accepted
    assert json.loads(accepted["body"])["agent_id"] == "agent-2"
    assert done["status"] == "SUCCEEDED", done
    handoff = world.store.handoffs.current_handoff(session_id)
    assert handoff is not None
    assert handoff.agent_id == "agent-2"
    # and a second accept (another agent) finds nothing waiting any more
    world.agent("agent-3")
    late = world.route("accept", session_id, "agent-3", {})
    assert late["statusCode"] == 409
    agent3 = world.store.agents.get_agent("agent-3")
    assert agent3 is not None
    assert agent3.status == AgentStatus.AVAILABLE


def test_accept_refuses_callers_that_are_not_agents(world: World) -> None:
    session_id = world.session()
    refused = world.route("accept", session_id, "customer-1", {}, role="customer")
    assert refused["statusCode"] == 403


def test_wait_timeout_escalates_to_an_available_manager(world: World) -> None:
    # Given no billing agent, but a manager with the manager skill
    session_id = world.session()
    world.agent("manager-1", skill="manager", manager=True)

    # When nobody accepts within the 4 s wait
    execution = world.start(session_id)
    world.d.wait_for_state(execution, "WaitForAgent")
    world.time_passes(CONFIG.handoff_agent_wait_seconds)
    world.d.wait_for_state(execution, "MonitorHandoff", timeout=60)

    # Then the manager took over through EscalateToManager
    states = world.d.states_entered(execution)
    assert states.index("WaitForAgent") < states.index("EscalateToManager") < states.index("UpdateDynamoDB")
    handoff = world.store.handoffs.current_handoff(session_id)
    assert handoff is not None
    assert handoff.agent_id == "manager-1"
    assert handoff.status == HandoffStatus.ASSIGNED


def test_wait_timeout_without_manager_fails_restores_nothing_and_tells_the_customer(world: World) -> None:
    # Given no agent and no manager
    session_id = world.session()

    # When the wait times out, and nobody takes the escalated handoff within the manager wait
    execution = world.start(session_id)
    world.d.wait_for_state(execution, "WaitForAgent")
    world.pump_assignments()
    world.time_passes(CONFIG.handoff_agent_wait_seconds)
    world.d.wait_for_state(execution, "WaitForManager")
    world.time_passes(CONFIG.handoff_manager_wait_seconds)
    done = world.d.wait_done(execution, timeout=120)

    # Then the execution failed after the escalation and the manager wait, with the reason as cause
    assert done["status"] == "FAILED"
    assert done["error"] == "HandoffFailed"
    assert "no manager took the escalated handoff in time" in _cause(done)
    states = world.d.states_entered(execution)
    assert states.index("EscalateToManager") < states.index("WaitForManager") < states.index("NoManagerTookOver")
    assert "UpdateDynamoDB" not in states
    # and the handoff ended failed, the session never moved; the customer was told once
    handoff = world.store.handoffs.current_handoff(session_id)
    assert handoff is not None
    assert handoff.status == HandoffStatus.FAILED
    session = world.store.sessions.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.ACTIVE
    assert [n["event_type"] for n in world.customer_notices()] == ["handoff_failed"]


def test_an_escalated_handoff_waits_for_a_manager_and_only_a_manager_takes_it(world: World) -> None:
    # Given a handoff nobody takes in time, and no manager free when it escalates
    session_id = world.session()
    execution = world.start(session_id)
    world.d.wait_for_state(execution, "WaitForAgent")
    world.pump_assignments()
    world.time_passes(CONFIG.handoff_agent_wait_seconds)
    world.d.wait_for_state(execution, "WaitForManager", timeout=30)
    handoff = world.store.handoffs.current_handoff(session_id)
    assert handoff is not None
    assert handoff.status == HandoffStatus.ESCALATED
    handoff_id = handoff.handoff_id
    world.wait_until(
        lambda: world.store.handoffs.waiting_for(session_id, handoff_id) == "agent",
        "WaitForManager's token is stored",
    )

    # When an agent with the reason's skill, but no manager, tries to take it
    world.agent("agent-9")
    refused = world.route("accept", session_id, "agent-9", {})
    # Then it is refused and the handoff still waits for a manager
    assert refused["statusCode"] == 409
    assert "waits for a manager" in json.loads(refused["body"])["error"]["message"]

    # When a manager who came online takes it
    world.agent("manager-2", skill="general", manager=True)
    accepted = world.route("accept", session_id, "manager-2", {})
    assert accepted["statusCode"] == 200, accepted
    world.d.wait_for_state(execution, "MonitorHandoff", timeout=30)

    # Then the session is handed to the manager
    handoff = world.store.handoffs.current_handoff(session_id)
    assert handoff is not None
    assert (handoff.status, handoff.agent_id) == (HandoffStatus.ASSIGNED, "manager-2")
    states = world.d.states_entered(execution)
    assert states.index("WaitForManager") < states.index("AssignAgent") < states.index("UpdateDynamoDB")


def test_inactive_session_fails_without_touching_agents(world: World) -> None:
    # Given a disconnected session and an available agent
    session_id = world.session()
    world.store.sessions.update_status(session_id, SessionStatus.DISCONNECTED)
    world.agent("agent-4")

    done = world.d.wait_done(world.start(session_id))

    assert done["status"] == "FAILED"
    assert "disconnected, not active" in _cause(done)
    agent = world.store.agents.get_agent("agent-4")
    assert agent is not None
    assert agent.status == AgentStatus.AVAILABLE
    assert not world.calls.by_handler("lambdas.orchestration.handoff.check_agent")


def test_a_customer_cannot_hand_over_someone_elses_session(world: World) -> None:
    # Given another customer's active session and an available agent
    session_id = world.session()
    world.agent("agent-8")

    done = world.d.wait_done(world.start(session_id, requested_by="customer-intruder"))

    # Then the handoff is refused at CheckSessionActive; no agent is reserved, the session is
    # untouched, and the session's real customer is not messaged by a stranger's request
    assert done["status"] == "FAILED"
    assert done.get("error") == "HandoffRefused"
    assert "may not hand this session over" in _cause(done)
    assert not world.calls.by_handler("lambdas.orchestration.handoff.check_agent")
    assert not world.calls.by_handler("lambdas.orchestration.handoff.fail")
    assert world.customer_notices() == []
    agent = world.store.agents.get_agent("agent-8")
    assert agent is not None
    assert agent.status == AgentStatus.AVAILABLE
    session = world.store.sessions.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.ACTIVE


def test_transaction_conflict_releases_the_reserved_agent(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an agent, and a session that disconnects right after the agent was reserved
    session_id = world.session()
    world.agent("agent-5")
    original = handoff_steps.check_agent

    def reserve_then_disconnect(event: dict[str, Any], context: Any) -> dict[str, Any]:
        result: dict[str, Any] = original(event, context)
        DynamoSessionStore(world.d.table_name).sessions.update_status(event["session_id"], SessionStatus.DISCONNECTED)
        return result

    monkeypatch.setattr(handoff_steps, "check_agent", reserve_then_disconnect)

    # When the transaction runs
    done = world.d.wait_done(world.start(session_id))

    # Then its condition failed, the handoff failed and the agent is free again
    assert done["status"] == "FAILED"
    assert "no longer active" in _cause(done)
    assert [c.error.__class__.__name__ for c in world.calls.by_handler("lambdas.orchestration.handoff.begin")] == [
        "ConditionalCheckFailed"
    ]
    agent = world.store.agents.get_agent("agent-5")
    assert agent is not None
    assert agent.status == AgentStatus.AVAILABLE
    session = world.store.sessions.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.DISCONNECTED
    assert world.store.handoffs.current_handoff(session_id) is None  # nothing of the transaction was written


def test_idle_agent_is_reassigned_until_the_bound_then_fails(world: World) -> None:
    # Given one agent who never replies, and a bound of 1 reassignment
    session_id = world.session()
    world.agent("agent-6")

    # When the idle limit passes twice
    execution = world.start(session_id)

    def assigned(times: int) -> Callable[[], bool]:
        return lambda: world.d.states_entered(execution).count("MonitorHandoff") == times

    for times in (1, 2):
        world.wait_until(assigned(times), f"assigned {times} time(s)")
        world.time_passes(CONFIG.handoff_idle_seconds)
    done = world.d.wait_done(execution, timeout=120)

    # Then: assigned, idle, reassigned once, assigned again, idle, bound reached -> failed
    assert done["status"] == "FAILED"
    assert "reassignment limit" in _cause(done)
    states = world.d.states_entered(done["executionArn"])
    assert states.count("ReassignAgent") == 2
    assert states.count("UpdateDynamoDB") == 2
    # and everything is back: session active, agent available, handoff failed
    session = world.store.sessions.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.ACTIVE
    agent = world.store.agents.get_agent("agent-6")
    assert agent is not None
    assert agent.status == AgentStatus.AVAILABLE
    handoff = world.store.handoffs.current_handoff(session_id)
    assert handoff is not None
    assert handoff.status == HandoffStatus.FAILED


def test_two_concurrent_handoffs_never_share_an_agent(world: World) -> None:
    # Given two sessions and a single available agent
    first, second = world.session(), world.session()
    world.agent("agent-7")

    # When both handoffs start at once
    executions = [world.start(first), world.start(second)]
    world.d.wait_for_state(executions[0], "IsAgentAvailable")
    world.d.wait_for_state(executions[1], "IsAgentAvailable")

    def owners() -> list[str | None]:
        handoffs = (world.store.handoffs.current_handoff(first), world.store.handoffs.current_handoff(second))
        return [h.agent_id for h in handoffs if h]

    def settled() -> bool:
        entered = [world.d.states_entered(e) for e in executions]
        return any("WaitForAgent" in s for s in entered) and "agent-7" in owners()

    # Then exactly one got the agent; the other waits for one
    world.wait_until(settled, "one handoff holds agent-7 and the other waits for an agent")
    entered = [world.d.states_entered(e) for e in executions]
    assert sum("UpdateDynamoDB" in s for s in entered) == 1
    assert sum("WaitForAgent" in s for s in entered) == 1
    assert owners().count("agent-7") == 1


def test_a_step_still_running_when_a_case_ends_returns_before_the_world_goes(
    templates: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a handoff whose TransferConversationContext is still running as its case ends, held until
    # the world has stopped the execution on its way out
    running, released, returned = threading.Event(), threading.Event(), threading.Event()
    transfer, stop = handoff_steps.transfer_context, handoff_harness.stop_running

    def held(event: dict[str, Any], context: Any) -> dict[str, Any]:
        running.set()
        released.wait(60)
        try:
            result: dict[str, Any] = transfer(event, context)
            return result
        finally:
            returned.set()

    def stop_then_release(client: Any, machines: list[str]) -> None:
        stop(client, machines)
        released.set()

    monkeypatch.setattr(handoff_steps, "transfer_context", held)
    monkeypatch.setattr(handoff_harness, "stop_running", stop_then_release)
    with running_world(templates, monkeypatch) as world:
        session_id = world.session()
        world.agent("agent-1")
        world.start(session_id)
        assert running.wait(60), "TransferConversationContext never started"
    # Then the step returned before the world went: nothing of the case runs on after its mock
    assert released.is_set()
    assert returned.is_set()
