"""The Onboarding Express workflow, as synthesized for dev, executed on moto's state machine executor.

Its two Lambda tasks run our handlers in this process (embedded.runtime) against a moto
table and moto's API Gateway management API. Retry waits are recorded instead of slept, so the
bounded, jittered "retry while the connection is not open yet" policy is checked exactly.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any
from unittest import mock

import boto3
import pytest
from moto import mock_aws
from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

from embedded.runtime import Invocations, deploy_function, in_process
from embedded.services.dynamodb import atomic_requests, create_sessions_table
from embedded.synth import default_stages
from lambdas.shared import connections, env
from lambdas.shared.records import Role, SessionStatus
from lambdas.shared.store import DynamoSessionStore
from lambdas.ws import onboarding
from tests.support.websocket import DOMAIN, STAGE, sent_frames

pytestmark = pytest.mark.slow

REGION = "us-east-1"
TABLE = "onboarding-test"
CONN = "L0SM9cOFvHcCIhw="
PREPARE = "lambdas.ws.onboarding.handler"
DELIVER = "lambdas.ws.onboarding.deliver"


def _resolve(value: Any, refs: Mapping[str, str]) -> Any:
    if isinstance(value, dict):
        if "Ref" in value:
            return refs[value["Ref"]]
        if "Fn::GetAtt" in value:
            return refs[".".join(value["Fn::GetAtt"])]
        if "Fn::Join" in value:
            separator, parts = value["Fn::Join"]
            return separator.join(str(_resolve(part, refs)) for part in parts)
    return value


def _synthesized() -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The dev onboarding machine's properties and the Lambda functions of the Api template by handler."""
    template = default_stages()["dev"].templates["Api"]
    machines = [
        res["Properties"]
        for lid, res in template["Resources"].items()
        if res["Type"] == "AWS::StepFunctions::StateMachine" and lid.startswith("ChatApiOnboarding")
    ]
    assert len(machines) == 1
    functions = {
        res["Properties"]["Handler"]: {"id": lid, **res["Properties"]}
        for lid, res in template["Resources"].items()
        if res["Type"] == "AWS::Lambda::Function"
    }
    return machines[0], functions


@pytest.fixture(scope="module")
def synthesized() -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    return _synthesized()


class Onboarding:
    """The deployed workflow: start it like $connect does, wait for it, inspect the outcome."""

    def __init__(self, machine_arn: str, calls: Invocations, waits: list[float]) -> None:
        self.machine_arn = machine_arn
        self.calls = calls
        self.waits = waits
        self.store = DynamoSessionStore(TABLE)
        self.sfn = boto3.client("stepfunctions", region_name=REGION)

    def start(self, *, customer: str = "alice", session_id: str | None = None, connection_id: str = CONN) -> str:
        execution_input = {
            "connection_id": connection_id,
            "customer_id": customer,
            "session_id": session_id,
            "domain_name": DOMAIN,
            "stage": STAGE,
            "request_id": uuid.uuid4().hex,
        }
        response = self.sfn.start_execution(
            stateMachineArn=self.machine_arn, name=f"run-{uuid.uuid4().hex}", input=json.dumps(execution_input)
        )
        return str(response["executionArn"])

    def run(self, **kwargs: Any) -> dict[str, Any]:
        arn = self.start(**kwargs)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            description = self.sfn.describe_execution(executionArn=arn)
            if description["status"] != "RUNNING":
                return dict(description)
            time.sleep(0.05)
        raise AssertionError("onboarding still RUNNING after 30 s")

    def handlers(self) -> list[str]:
        return [call.handler for call in self.calls.calls]


@contextmanager
def deployed(synthesized: tuple[dict[str, Any], dict[str, dict[str, Any]]]) -> Iterator[Onboarding]:
    machine, functions = synthesized
    waits: list[float] = []
    with (
        mock_aws(config={"stepfunctions": {"execute_state_machine": True}}),
        atomic_requests(),
        in_process() as calls,
        mock.patch.object(retrier_decl, "time", SimpleNamespace(sleep=waits.append)),
    ):
        create_sessions_table(boto3.client("dynamodb", region_name=REGION), TABLE)
        refs = {"AWS::Partition": "aws", "AWS::Region": REGION, "AWS::AccountId": "123456789012"}
        for handler in (PREPARE, DELIVER):
            variables = dict(functions[handler]["Environment"]["Variables"])
            if "TABLE_NAME" in variables:
                variables["TABLE_NAME"] = TABLE
            refs[f"{functions[handler]['id']}.Arn"] = deploy_function(handler, variables, region=REGION)
        definition = _resolve(machine["DefinitionString"], refs)
        arn = boto3.client("stepfunctions", region_name=REGION).create_state_machine(
            name="onboarding",
            definition=definition,
            roleArn="arn:aws:iam::123456789012:role/onboarding",
            type=machine["StateMachineType"],
        )["stateMachineArn"]
        yield Onboarding(arn, calls, waits)
    env.reset()


def flaky_delivery(failures: int) -> Callable[..., bool]:
    """post_to_connection that answers 410 Gone ``failures`` times (the $connect still running)."""
    real = connections.post_to_connection
    seen: list[int] = []

    def post(endpoint: str, connection_id: str, payload: Mapping[str, Any], **kwargs: Any) -> bool:
        seen.append(1)
        if len(seen) <= failures:
            return False
        return real(endpoint, connection_id, payload, **kwargs)

    return post


def test_new_connection_gets_a_session_a_greeting_and_the_welcome_frame(synthesized: Any) -> None:
    with deployed(synthesized) as flow:
        # When $connect starts the workflow for a new chat
        execution = flow.run()
        # Then it succeeds having created the session, the connection record and the greeting
        assert execution["status"] == "SUCCEEDED"
        connection = flow.store.connections.get_connection(CONN)
        assert connection is not None
        session = flow.store.sessions.get_session(connection.session_id)
        assert session is not None
        assert (session.customer_id, session.status, session.connection_id) == ("alice", SessionStatus.ACTIVE, CONN)
        [greeting] = flow.store.turns.list_turns(session.session_id).items
        # And the customer received the welcome frame
        [frame] = sent_frames(CONN)
        assert frame == {
            "type": "welcome",
            "session_id": session.session_id,
            "resumed": False,
            "status": "active",
            "message": greeting.content,
            "turn_number": 1,
        }
        assert flow.handlers() == [PREPARE, DELIVER]


def test_welcome_waits_for_the_connection_to_open_with_jittered_bounded_retries(synthesized: Any) -> None:
    with deployed(synthesized) as flow, mock.patch.object(onboarding, "post_to_connection", flaky_delivery(2)):
        # Given the management API answers Gone twice (the client's $connect has not returned yet)
        execution = flow.run()
        # Then the delivery is retried by the workflow and the frame arrives once the connection is open
        assert execution["status"] == "SUCCEEDED"
        assert flow.handlers() == [PREPARE, DELIVER, DELIVER, DELIVER]
        assert [f["type"] for f in sent_frames(CONN)] == ["welcome"]
        # And the two waits were full-jitter draws within 1 s then 2 s (interval 1 s, backoff 2)
        assert len(flow.waits) == 2
        assert 0 <= flow.waits[0] <= 1
        assert 0 <= flow.waits[1] <= 2


def test_client_that_never_opens_is_abandoned_and_its_session_disconnected(synthesized: Any) -> None:
    with deployed(synthesized) as flow, mock.patch.object(onboarding, "post_to_connection", flaky_delivery(99)):
        execution = flow.run()
        # The execution succeeds (nothing is broken), after the bounded retries, having closed the session
        assert execution["status"] == "SUCCEEDED"
        deliveries = flow.handlers().count(DELIVER)
        assert deliveries == 1 + 6  # first try + delivery_max_attempts
        assert all(wait <= 8 for wait in flow.waits)  # capped by delivery_max_delay
        assert flow.handlers()[-1] == PREPARE  # the "abandon" step
        assert flow.calls.calls[-1].event["step"] == "abandon"
        sessions = flow.store.sessions.list_customer_sessions("alice").items
        assert [s.status for s in sessions] == [SessionStatus.DISCONNECTED]
        assert flow.store.connections.get_connection(CONN) is None


def test_first_connect_to_a_session_created_over_rest_sends_the_new_session_greeting(synthesized: Any) -> None:
    with deployed(synthesized) as flow:
        session_id = flow.store.sessions.create_session("alice").session_id
        execution = flow.run(session_id=session_id)
        assert execution["status"] == "SUCCEEDED"
        [frame] = sent_frames(CONN)
        assert (frame["session_id"], frame["resumed"], frame["message"]) == (session_id, False, onboarding.GREETING)


def test_resume_of_own_session_sends_welcome_back(synthesized: Any) -> None:
    with deployed(synthesized) as flow:
        session_id = flow.store.sessions.create_session("alice").session_id
        flow.store.turns.add_turn(session_id, Role.USER, "Is volume 3 out yet?")
        execution = flow.run(session_id=session_id)
        assert execution["status"] == "SUCCEEDED"
        [frame] = sent_frames(CONN)
        assert (frame["session_id"], frame["resumed"], frame["message"]) == (session_id, True, onboarding.WELCOME_BACK)


def test_foreign_session_fails_the_workflow_after_telling_the_client(synthesized: Any) -> None:
    with deployed(synthesized) as flow:
        # Given a session of another customer (the $connect check raced with nothing: defence in depth)
        session_id = flow.store.sessions.create_session("mallory").session_id
        execution = flow.run(session_id=session_id)
        # Then the workflow fails, the client got a stable error frame, and nothing was attached
        assert execution["status"] == "FAILED"
        assert execution.get("error") == "OnboardingFailed"
        assert sent_frames(CONN) == [
            {
                "type": "error",
                "code": "onboarding_failed",
                "message": "We could not start your chat session. Please reconnect in a moment.",
            }
        ]
        session = flow.store.sessions.get_session(session_id)
        assert session is not None
        assert session.connection_id is None
        assert flow.store.turns.list_turns(session_id).items == []
