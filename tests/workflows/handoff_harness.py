"""The handoff workflow's test world: the synthesized state machine on moto, its Lambdas in-process.

Timeouts come from a test StageConfig (4 s agent wait, 3 s idle, 1 reassignment), on a frozen
clock: a wait or timeout ends only where a test lets that time pass (:meth:`World.time_passes`),
never because the machine was slow. The agent routes (``lambdas.api.agent``) and the session routes
(``lambdas.api.rest``) are driven with API Gateway events carrying the authorizer context,
exactly as the REST API would call them.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from embedded.clock import Clock
from embedded.events import (
    ACCOUNT,
    Api,
    authorizer_context,
    batch_event,
    lambda_context,
    rest_proxy_event,
    sqs_record_from,
)
from embedded.runtime import Invocations, in_process, mock_client
from embedded.services.dynamodb import atomic_requests
from embedded.services.lambda_concurrency import Concurrency
from embedded.services.stepfunctions import stop_running, timers_on, waiting_deadlines
from embedded.synth import stage_config
from lambdas.api import agent as agent_api
from lambdas.api import rest as session_api
from lambdas.shared import env as lambda_env
from lambdas.shared.records import Agent, Role
from lambdas.shared.store import DynamoSessionStore
from stacks.config import with_overrides
from stacks.functions import stage_environment
from tests.workflows.orchestration_harness import REGION, Deployed, deploy

CONFIG = with_overrides(
    stage_config("dev"),
    name="test",
    handoff_agent_wait_seconds=4,
    handoff_manager_wait_seconds=4,
    handoff_idle_seconds=3,
    handoff_max_reassignments=1,
    workflow_timeout_minutes=5,
    review_ttl_days=1,
)


class World:
    def __init__(self, deployed: Deployed, calls: Invocations, clock: Clock) -> None:
        self.d = deployed
        self.calls = calls
        self.clock = clock
        self.store = DynamoSessionStore(deployed.table_name)
        self.machine = deployed.state_machine("Handoff")
        self.customer_queue = deployed.queue("Events", "HandoffTopicCustomerNotificationQueue")
        self.assignment_queue = deployed.queue("Orchestration", "HandoffAssignmentQueue")
        self.consumer = deployed.function("AssignmentConsumer")

    def session(self, *, turns: int = 2) -> str:
        session = self.store.sessions.create_session(f"customer-{uuid.uuid4().hex[:6]}")
        for n in range(turns):
            self.store.turns.add_turn(session.session_id, Role.USER, f"question {n}")
        return session.session_id

    def agent(self, agent_id: str, skill: str = "billing", *, manager: bool = False) -> None:
        self.store.agents.put_agent(Agent(agent_id=agent_id, skills=(skill,), is_manager=manager))

    def start(
        self,
        session_id: str,
        reason: str = "billing",
        *,
        requested_by: str | None = None,
        name: str | None = None,
        priority: str = "normal",
    ) -> str:
        """Start as the API does: the caller from the authorizer (default: the session's customer)."""
        session = self.store.sessions.get_session(session_id)
        owner = session.customer_id if session else "nobody"
        state = {
            "session_id": session_id,
            "reason": reason,
            "priority": priority,
            "requested_by": requested_by or owner,
            "role": "customer",
        }
        return self.d.start(self.machine, state, name=name)

    def wait_until(self, condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
        """Poll ``condition`` until it holds; the timeout only bounds a run that would never get there."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"never happened within {timeout:.0f}s: {what}")
            time.sleep(0.1)

    def time_passes(self, seconds: float, timeout: float = 60.0) -> None:
        """``seconds`` pass on the workflows' clock, once a timer is waiting that they end.

        The clock is frozen, so a wait ends only here. This first waits (in real time, bounded)
        until the workflow has started a timer that ``seconds`` reach: an advance made before the
        workflow got to its wait would be spent on nothing.
        """
        now = self.clock()
        self.wait_until(
            lambda: any(due <= now + seconds for due in waiting_deadlines(self.clock)),
            f"a workflow timer that {seconds} s end",
            timeout,
        )
        self.clock.advance(seconds)

    def waiting_for_reply(self, session_id: str, handoff_id: str) -> None:
        """Until MonitorHandoff's token is stored (entering the state is not enough: its task stores it)."""
        self.wait_until(
            lambda: self.store.handoffs.waiting_for(session_id, handoff_id) == "reply",
            f"handoff {handoff_id} waits for the agent's first reply",
        )

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

    def read_inbox(self, agent_id: str) -> dict[str, Any]:
        """``GET /agents/me/inbox`` as the agent (lambdas.api.agent, as API Gateway calls it): the 200 answer."""
        lambda_env.reset()
        event = rest_proxy_event(
            "GET",
            "/agents/me/inbox",
            "/agents/me/inbox",
            api=Api(stage="prod"),
            authorizer=authorizer_context(agent_id, sub=agent_id, role="agent"),
        )
        response = agent_api.handler(event, CONTEXT)
        assert response["statusCode"] == 200, response
        body: dict[str, Any] = json.loads(response["body"])
        return body

    def read_turns(self, session_id: str, agent_id: str) -> int:
        """``GET /sessions/{id}/turns`` as the agent (lambdas.api.rest, as API Gateway calls it): the status."""
        lambda_env.reset()
        event = rest_proxy_event(
            "GET",
            "/sessions/{id}/turns",
            f"/sessions/{session_id}/turns",
            api=Api(stage="prod"),
            path_parameters={"id": session_id},
            authorizer=authorizer_context(agent_id, sub=agent_id, role="agent"),
        )
        return int(session_api.handler(event, CONTEXT)["statusCode"])


CONTEXT = lambda_context("agent-routes")


@contextlib.contextmanager
def running_world(templates: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """Deploy ``templates`` on moto and give the in-process routes the functions' environment.

    On the way out, as the embedded stage does: every execution a test left running is stopped, and
    a step still running on moto's executor thread returns before the mock and the environment go.
    Without it a handoff that had just been assigned when its test ended ran TransferConversationContext
    past the test: it put its function's variables back after monkeypatch had removed them (taken for
    a leak by the next check) and called AWS after the mock was gone.
    """
    clock = Clock()
    with (
        mock_aws(config={"stepfunctions": {"execute_state_machine": True}}),
        atomic_requests(),
        in_process() as calls,
        Concurrency().installed() as invocations,
        clock.frozen(),
        clock.installed(),
        timers_on(clock),
    ):
        deployed = deploy(templates)
        # The agent routes run in this process: give them the function's environment (the stage's settings too)
        for name, value in {**stage_environment(CONFIG), "TABLE_NAME": deployed.table_name}.items():
            monkeypatch.setenv(name, value)
        lambda_env.reset()
        try:
            yield World(deployed, calls, clock)
        finally:
            sfn = mock_client("stepfunctions", REGION)
            stop_running(sfn, [m["stateMachineArn"] for m in sfn.list_state_machines()["stateMachines"]])
            invocations.close()
            lambda_env.reset()
