"""Step Functions on moto's executor, each definition parsed once and one client per service for its tasks:
executions still run each on their own."""

from __future__ import annotations

import importlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor
from moto.stepfunctions.parser.asl.utils import boto_client

from embedded.clock import Clock
from embedded.services.stepfunctions import (
    TASK_CLIENT_MODULES,
    ClockEvent,
    definitions_parsed_once,
    task_clients_reused,
    waiting_deadlines,
)

ROLE = "arn:aws:iam::123456789012:role/sfn"


@pytest.fixture
def parses() -> Iterator[list[str]]:
    """moto's parses of a definition (ANTLR), recorded beneath the layer under test."""
    seen: list[str] = []
    parse = AmazonStateLanguageParser.parse

    def counted(definition: str) -> Any:
        seen.append(definition)
        return parse(definition)

    with (
        mock.patch.object(AmazonStateLanguageParser, "parse", staticmethod(counted)),
        definitions_parsed_once(),
        mock_aws(config={"stepfunctions": {"execute_state_machine": True}}),
    ):
        yield seen


def _definition() -> str:
    """A definition no other test parsed: the choice's branch and the result depend on the input."""
    return json.dumps(
        {
            "Comment": f"parsed once {uuid.uuid4()}",
            "StartAt": "Which",
            "States": {
                "Which": {
                    "Type": "Choice",
                    "Choices": [{"Variable": "$.n", "NumericGreaterThan": 10, "Next": "Big"}],
                    "Default": "Small",
                },
                "Big": {"Type": "Pass", "Parameters": {"size": "big", "n.$": "$.n"}, "End": True},
                "Small": {"Type": "Pass", "Parameters": {"size": "small", "n.$": "$.n"}, "End": True},
            },
        }
    )


def _output(sfn: Any, machine: str, state: dict[str, Any]) -> Any:
    execution = sfn.start_execution(stateMachineArn=machine, name=str(uuid.uuid4()), input=json.dumps(state))[
        "executionArn"
    ]
    deadline = time.monotonic() + 30
    while (described := sfn.describe_execution(executionArn=execution))["status"] == "RUNNING":
        assert time.monotonic() < deadline, "the execution did not end in 30 s"
        time.sleep(0.02)
    assert described["status"] == "SUCCEEDED", described
    return json.loads(described["output"])


def test_executions_of_one_definition_parse_it_once_and_each_runs_on_its_own_input(parses: list[str]) -> None:
    # Given a state machine
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    definition = _definition()
    machine = sfn.create_state_machine(name="choice", definition=definition, roleArn=ROLE)["stateMachineArn"]

    # When it runs three times, on inputs that take different branches
    outputs = [_output(sfn, machine, {"n": n}) for n in (3, 42, 7)]

    # Then each execution took its own branch, and the definition was parsed once, at creation
    assert outputs == [{"size": "small", "n": 3}, {"size": "big", "n": 42}, {"size": "small", "n": 7}]
    assert parses.count(definition) == 1


def test_a_second_state_machine_of_a_kept_definition_is_not_built_again_to_validate_it(parses: list[str]) -> None:
    # Given a state machine, whose definition creating it parsed and kept
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    definition = _definition()
    sfn.create_state_machine(name="first", definition=definition, roleArn=ROLE)
    built: list[Any] = []
    visit = Preprocessor.visit

    def counted(self: Preprocessor, tree: Any) -> Any:
        built.append(tree)
        return visit(self, tree)

    with mock.patch.object(Preprocessor, "visit", counted):
        # When another state machine is created from the same text
        second = sfn.create_state_machine(name="second", definition=definition, roleArn=ROLE)["stateMachineArn"]
        # Then nothing was built to check it
        assert built == []
        # And it runs, built from the kept tree when its execution starts
        assert _output(sfn, second, {"n": 42}) == {"size": "big", "n": 42}
        assert built
    assert parses.count(definition) == 1


def test_a_definition_that_does_not_parse_is_refused_every_time(parses: list[str]) -> None:
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    broken = '{"StartAt": "Nowhere", "States": {"Nowhere": {"Type": "Pass", "End": true'

    for name in ("first", "second"):
        with pytest.raises(ClientError) as refused:
            sfn.create_state_machine(name=name, definition=broken, roleArn=ROLE)
        assert "ASLParserException" in refused.value.response["Error"]["Message"]

    assert parses.count(broken) == 2


def test_a_waiting_timer_is_listed_on_its_own_clock_until_it_ends() -> None:
    # Given a timer of 30 s waiting on a frozen clock, in its own thread as moto's executor waits
    clock, other = Clock(), Clock()
    with clock.frozen():
        now = clock()
        timer = ClockEvent(clock)
        waiter = threading.Thread(target=timer.wait, args=(30,), daemon=True)
        waiter.start()
        deadline = time.monotonic() + 60
        while not waiting_deadlines(clock) and time.monotonic() < deadline:
            time.sleep(0.01)

        # Then its deadline is listed on its clock alone, and it ends when the clock reaches it
        assert waiting_deadlines(clock) == [now + 30]
        assert waiting_deadlines(other) == []
        clock.advance(30)
        waiter.join(timeout=60)
        assert not waiter.is_alive()
        assert waiting_deadlines(clock) == []


def test_tasks_of_every_execution_share_one_client_per_service() -> None:
    # Given a state machine of two SQS tasks, and the clients moto's executor makes counted
    made: list[str] = []
    make = boto_client.boto_client_for

    def counted(region: str, service: str, state_credentials: Any = None) -> Any:
        made.append(service)
        return make(region, service, state_credentials)

    with (
        mock.patch.object(boto_client, "boto_client_for", counted),
        task_clients_reused(),
        mock_aws(config={"stepfunctions": {"execute_state_machine": True}}),
    ):
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue = sqs.create_queue(QueueName="tasks")["QueueUrl"]
        send = {"Type": "Task", "Resource": "arn:aws:states:::sqs:sendMessage"}
        definition = {
            "StartAt": "First",
            "States": {
                "First": {
                    **send,
                    "Parameters": {"QueueUrl": queue, "MessageBody.$": "$.n"},
                    "ResultPath": None,
                    "Next": "Second",
                },
                "Second": {**send, "Parameters": {"QueueUrl": queue, "MessageBody": "second"}, "End": True},
            },
        }
        sfn = boto3.client("stepfunctions", region_name="us-east-1")
        machine = sfn.create_state_machine(name="tasks", definition=json.dumps(definition), roleArn=ROLE)[
            "stateMachineArn"
        ]

        # When it runs twice
        for n in ("1", "2"):
            assert "MessageId" in _output(sfn, machine, {"n": n})

        # Then all four tasks sent their message, through the one SQS client made
        bodies = sorted(m["Body"] for m in sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"])
        assert bodies == ["1", "2", "second", "second"]
        assert made == ["sqs"]


def test_every_module_of_the_executor_that_makes_task_clients_is_patched() -> None:
    # moto imports ``boto_client_for`` by name: a module left out would still make a client per task.
    package = Path(importlib.import_module("moto.stepfunctions").__file__ or "").parent
    importing = {
        "moto." + ".".join(path.relative_to(package.parent).with_suffix("").parts)
        for path in package.rglob("*.py")
        if "import boto_client_for" in path.read_text()
    }
    assert importing == set(TASK_CLIENT_MODULES)
