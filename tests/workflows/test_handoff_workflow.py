"""The handoff state machine, as synthesized, executed on moto with its Lambdas in-process.

Timeouts come from a test StageConfig (4 s agent wait, 3 s idle, 1 reassignment), so every
case runs in seconds. The agent routes (``lambdas.api.agent``) are driven with API Gateway
events carrying the authorizer context, exactly as the REST API would call them.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from lambdas.api import agent as agent_api
from lambdas.orchestration import handoff as handoff_steps
from lambdas.shared import env as lambda_env
from lambdas.shared.records import Agent, AgentStatus, HandoffStatus, Role, SessionStatus
from lambdas.shared.store import DynamoSessionStore
from stacks.config import with_overrides
from stacks.functions import stage_environment
from tests.support.ddb import atomic_requests
from tests.support.events import (
    ACCOUNT,
    Api,
    authorizer_context,
    batch_event,
    lambda_context,
    rest_proxy_event,
    sqs_record_from,
)
from tests.support.lambda_bridge import Invocations, in_process
from tests.support.synth import stage_config
from tests.workflows.orchestration_harness import REGION, Deployed, deploy, synthesize_orchestration

CONFIG = with_overrides(
    stage_config("dev"),
    name="test",
    handoff_agent_wait_seconds=4,
    handoff_idle_seconds=3,
    handoff_max_reassignments=1,
    workflow_timeout_minutes=5,
    review_ttl_days=1,
)


@pytest.fixture(scope="module")
def templates() -> dict[str, Any]:
    return synthesize_orchestration(CONFIG)


class World:
    def __init__(self, deployed: Deployed, calls: Invocations) -> None:
        self.d = deployed
        self.calls = calls
        self.store = DynamoSessionStore(deployed.table_name)
        self.machine = deployed.state_machine("Handoff")
        self.customer_queue = deployed.queue("Events", "HandoffTopicCustomerNotificationQueue")
        self.assignment_queue = deployed.queue("Orchestration", "HandoffAssignmentQueue")
        self.consumer = deployed.function("AssignmentConsumer")

    def session(self, *, turns: int = 2) -> str:
        session = self.store.create_session(f"customer-{uuid.uuid4().hex[:6]}")
        for n in range(turns):
            self.store.add_turn(session.session_id, Role.USER, f"question {n}")
        return session.session_id

    def agent(self, agent_id: str, skill: str = "billing", *, manager: bool = False) -> None:
        self.store.put_agent(Agent(agent_id=agent_id, skills=(skill,), is_manager=manager))

    def start(self, session_id: str, reason: str = "billing", *, requested_by: str | None = None) -> str:
        """Start as the API does: the caller from the authorizer (default: the session's customer)."""
        session = self.store.get_session(session_id)
        owner = session.customer_id if session else "nobody"
        state = {
            "session_id": session_id,
            "reason": reason,
            "priority": "normal",
            "requested_by": requested_by or owner,
            "role": "customer",
        }
        return self.d.start(self.machine, state)

    def pump_assignments(self, timeout: float = 10.0) -> int:
        """Deliver the agent-assignment queue's messages to the deployed consumer, as SQS would."""
        sqs = boto3.client("sqs", region_name=REGION)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            messages = sqs.receive_message(QueueUrl=self.assignment_queue, MaxNumberOfMessages=10).get("Messages", [])
            if messages:
                queue_arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:assignment"
                event = batch_event(*(sqs_record_from(m, queue_arn=queue_arn) for m in messages))
                response = boto3.client("lambda", region_name=REGION).invoke(
                    FunctionName=self.consumer, Payload=json.dumps(event).encode()
                )
                assert "FunctionError" not in response, response["Payload"].read()
                for m in messages:
                    sqs.delete_message(QueueUrl=self.assignment_queue, ReceiptHandle=m["ReceiptHandle"])
                return len(messages)
            time.sleep(0.1)
        raise AssertionError("nothing arrived on the agent-assignment queue")

    def customer_notices(self) -> list[dict[str, Any]]:
        sqs = boto3.client("sqs", region_name=REGION)
        found: list[dict[str, Any]] = []
        while True:
            messages = sqs.receive_message(QueueUrl=self.customer_queue, MaxNumberOfMessages=10).get("Messages", [])
            if not messages:
                return found
            for m in messages:
                found.append(json.loads(m["Body"]))
                sqs.delete_message(QueueUrl=self.customer_queue, ReceiptHandle=m["ReceiptHandle"])

    def route(self, method_path: str, session_id: str, agent_id: str, body: Any, role: str = "agent") -> dict[str, Any]:
        """Call lambdas.api.agent as API Gateway does, with the authorizer's context."""
        lambda_env.reset()
        action = method_path.rsplit("/", 1)[-1]
        event = rest_proxy_event(
            "POST",
            f"/handoffs/{{session_id}}/{action}",
            f"/handoffs/{session_id}/{action}",
            api=Api(stage="prod"),
            path_parameters={"session_id": session_id},
            headers={"Content-Type": "application/json"},
            body=json.dumps(body),
            authorizer=authorizer_context(agent_id, sub=agent_id, role=role),
        )
        result: dict[str, Any] = agent_api.handler(event, CONTEXT)
        return result


@pytest.fixture
def world(templates: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    with (
        mock_aws(config={"stepfunctions": {"execute_state_machine": True}}),
        atomic_requests(),
        in_process() as calls,
    ):
        deployed = deploy(templates)
        # The agent routes run in this process: give them the function's environment (the stage's settings too)
        for name, value in {**stage_environment(CONFIG), "TABLE_NAME": deployed.table_name}.items():
            monkeypatch.setenv(name, value)
        lambda_env.reset()
        yield World(deployed, calls)
        lambda_env.reset()


CONTEXT = lambda_context("agent-routes")


def _cause(description: dict[str, Any]) -> str:
    return str(description.get("cause", ""))


# ---------------------------------------------------------------------- cases


def test_agent_free_hands_over_and_completes_on_first_reply(world: World) -> None:
    # Given a session with two turns and one available billing agent
    session_id = world.session()
    world.agent("agent-1")

    # When the handoff starts, and the agent answers once MonitorHandoff waits
    execution = world.start(session_id)
    world.d.wait_for_state(execution, "MonitorHandoff")
    time.sleep(0.3)  # the await_reply Lambda stores the token right after entering
    reply = world.route("messages", session_id, "agent-1", {"text": "Hi, I am Ana from billing."})
    done = world.d.wait_done(execution)

    # Then the execution succeeded along the happy path
    assert reply["statusCode"] == 201, reply
    assert done["status"] == "SUCCEEDED", done
    states = world.d.states_entered(execution)
    assert states[:6] == [
        "ValidateSession",
        "CheckSessionActive",
        "CheckAgentAvailability",
        "IsAgentAvailable",
        "AssignAgent",
        "UpdateDynamoDB",
    ]
    assert states[-1] == "HandoffComplete"
    assert "WaitForAgent" not in states
    # and the transaction wrote all three items: session in handoff, record assigned, system turn 3
    session = world.store.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.HANDOFF
    handoff = world.store.latest_handoff(session_id)
    assert handoff is not None
    assert handoff.status == HandoffStatus.ASSIGNED
    assert handoff.agent_id == "agent-1"
    turns = world.store.list_turns(session_id).items
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
    agent = world.store.get_agent("agent-1")
    assert agent is not None
    assert agent.status == AgentStatus.BUSY
    assert agent.current_session_id == session_id


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
    time.sleep(0.3)
    world.route("messages", session_id, "agent-2", {"text": "Hello!"})
    done = world.d.wait_done(execution)

    # Then the handoff went through WaitForAgent to the accepting agent
    assert accepted["statusCode"] == 200, accepted
    assert json.loads(accepted["body"])["agent_id"] == "agent-2"
    assert done["status"] == "SUCCEEDED", done
    handoff = world.store.latest_handoff(session_id)
    assert handoff is not None
    assert handoff.agent_id == "agent-2"
    # and a second accept (another agent) finds nothing waiting any more
    world.agent("agent-3")
    late = world.route("accept", session_id, "agent-3", {})
    assert late["statusCode"] == 409
    agent3 = world.store.get_agent("agent-3")
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
    world.d.wait_for_state(execution, "MonitorHandoff", timeout=60)

    # Then the manager took over through EscalateToManager
    states = world.d.states_entered(execution)
    assert states.index("WaitForAgent") < states.index("EscalateToManager") < states.index("UpdateDynamoDB")
    handoff = world.store.latest_handoff(session_id)
    assert handoff is not None
    assert handoff.agent_id == "manager-1"
    assert handoff.status == HandoffStatus.ASSIGNED
    boto3.client("stepfunctions", region_name=REGION).stop_execution(executionArn=execution)


def test_wait_timeout_without_manager_fails_restores_nothing_and_tells_the_customer(world: World) -> None:
    # Given no agent and no manager
    session_id = world.session()

    # When the wait times out
    execution = world.start(session_id)
    done = world.d.wait_done(execution, timeout=120)

    # Then the execution failed after the escalation, with the reason as cause
    assert done["status"] == "FAILED"
    assert done["error"] == "HandoffFailed"
    assert "no manager" in _cause(done)
    states = world.d.states_entered(execution)
    assert "EscalateToManager" in states
    assert "UpdateDynamoDB" not in states
    # and the session never moved; the customer was told once
    session = world.store.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.ACTIVE
    assert [n["event_type"] for n in world.customer_notices()] == ["handoff_failed"]


def test_inactive_session_fails_without_touching_agents(world: World) -> None:
    # Given a disconnected session and an available agent
    session_id = world.session()
    world.store.update_status(session_id, SessionStatus.DISCONNECTED)
    world.agent("agent-4")

    done = world.d.wait_done(world.start(session_id))

    assert done["status"] == "FAILED"
    assert "disconnected, not active" in _cause(done)
    agent = world.store.get_agent("agent-4")
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
    agent = world.store.get_agent("agent-8")
    assert agent is not None
    assert agent.status == AgentStatus.AVAILABLE
    session = world.store.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.ACTIVE


def test_transaction_conflict_releases_the_reserved_agent(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an agent, and a session that disconnects right after the agent was reserved
    session_id = world.session()
    world.agent("agent-5")
    original = handoff_steps.check_agent

    def reserve_then_disconnect(event: dict[str, Any], context: Any) -> dict[str, Any]:
        result: dict[str, Any] = original(event, context)
        DynamoSessionStore(world.d.table_name).update_status(event["session_id"], SessionStatus.DISCONNECTED)
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
    agent = world.store.get_agent("agent-5")
    assert agent is not None
    assert agent.status == AgentStatus.AVAILABLE
    session = world.store.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.DISCONNECTED
    assert world.store.latest_handoff(session_id) is None  # nothing of the transaction was written


def test_idle_agent_is_reassigned_until_the_bound_then_fails(world: World) -> None:
    # Given one agent who never replies, and a bound of 1 reassignment
    session_id = world.session()
    world.agent("agent-6")

    done = world.d.wait_done(world.start(session_id), timeout=120)

    # Then: assigned, idle, reassigned once, assigned again, idle, bound reached -> failed
    assert done["status"] == "FAILED"
    assert "reassignment limit" in _cause(done)
    states = world.d.states_entered(done["executionArn"])
    assert states.count("ReassignAgent") == 2
    assert states.count("UpdateDynamoDB") == 2
    # and everything is back: session active, agent available, handoff failed
    session = world.store.get_session(session_id)
    assert session is not None
    assert session.status == SessionStatus.ACTIVE
    agent = world.store.get_agent("agent-6")
    assert agent is not None
    assert agent.status == AgentStatus.AVAILABLE
    handoff = world.store.latest_handoff(session_id)
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
    time.sleep(1.0)

    # Then exactly one got the agent; the other waits for one
    entered = [world.d.states_entered(e) for e in executions]
    assert sum("UpdateDynamoDB" in s for s in entered) == 1
    assert sum("WaitForAgent" in s for s in entered) == 1
    owners = [h.agent_id for h in (world.store.latest_handoff(first), world.store.latest_handoff(second)) if h]
    assert owners.count("agent-7") == 1
    for execution in executions:
        boto3.client("stepfunctions", region_name=REGION).stop_execution(executionArn=execution)
