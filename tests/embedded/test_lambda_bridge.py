"""The in-process Lambda bridge that workflow and end-to-end tests rely on."""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import boto3
import pytest
from moto import mock_aws

from embedded.runtime import deploy_function, function_environment, in_process

SFN_CONFIG = {"stepfunctions": {"execute_state_machine": True}}


def _run(sfn: Any, definition: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    machine = sfn.create_state_machine(
        name=f"m{time.monotonic_ns()}",
        definition=json.dumps(definition),
        roleArn="arn:aws:iam::123456789012:role/sfn",
    )
    execution = sfn.start_execution(stateMachineArn=machine["stateMachineArn"], input=json.dumps(payload))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        described: dict[str, Any] = sfn.describe_execution(executionArn=execution["executionArn"])
        if described["status"] != "RUNNING":
            return described
        time.sleep(0.05)
    raise AssertionError("execution did not finish in 10 s")


def _task(arn: str, **extra: Any) -> dict[str, Any]:
    return {
        "Type": "Task",
        "Resource": "arn:aws:states:::lambda:invoke",
        "Parameters": {"FunctionName": arn, "Payload.$": "$"},
        "ResultSelector": {"value.$": "$.Payload"},
        **extra,
    }


def test_direct_invoke_runs_the_handler_with_its_environment() -> None:
    with mock_aws(), in_process() as calls:
        arn = deploy_function("tests.fixtures.probe_pkg.handler.environment", {"PROBE_VALUE": "from-template"})
        response = boto3.client("lambda").invoke(FunctionName=arn, Payload=b"{}")
        assert json.loads(response["Payload"].read()) == {
            "value": "from-template",
            "function": "tests-fixtures-probe_pkg-handler-environment",
        }
    # The function's environment is scoped to the call: afterwards the variable is unset ("", the
    # bridge never deletes a variable, see function_environment) ...
    assert os.environ.get("PROBE_VALUE", "") == ""
    assert [c.event for c in calls.calls] == [{}]


def test_a_function_never_sees_another_functions_variables() -> None:
    with mock_aws(), in_process():
        first = deploy_function("tests.fixtures.probe_pkg.handler.environment", {"PROBE_VALUE": "mine"}, name="a")
        second = deploy_function("tests.fixtures.probe_pkg.handler.environment", {}, name="b")
        client = boto3.client("lambda")
        client.invoke(FunctionName=first, Payload=b"{}")
        seen = json.loads(client.invoke(FunctionName=second, Payload=b"{}")["Payload"].read())
    assert not seen["value"], "the first function's variable leaked into the second"


def test_each_function_keeps_a_warm_container_of_its_own_until_its_configuration_changes() -> None:
    # Given two functions that cache a setting once per container, as the handlers do
    with mock_aws(), in_process():
        first = deploy_function("tests.fixtures.probe_pkg.handler.warm", {"PROBE_VALUE": "one"}, name="warm-a")
        second = deploy_function("tests.fixtures.probe_pkg.handler.warm", {"PROBE_VALUE": "two"}, name="warm-b")
        client = boto3.client("lambda")

        def call(arn: str) -> dict[str, Any]:
            answer: dict[str, Any] = json.loads(client.invoke(FunctionName=arn, Payload=b"{}")["Payload"].read())
            return answer

        # When each is invoked twice, and the first again after its configuration changed
        a1, b1, a2, b2 = call(first), call(second), call(first), call(second)
        client.update_function_configuration(FunctionName=first, Environment={"Variables": {"PROBE_VALUE": "three"}})
        a3 = call(first)

    # Then each function's second invocation found its own container warm, with its own setting ...
    assert (a1["value"], b1["value"]) == ("one", "two")
    assert (a2, b2) == (a1, b1)
    assert b1["container"] == a1["container"] + 1
    # ... and a changed configuration started a new container that read the new value
    assert a3 == {"value": "three", "container": b1["container"] + 1}


def test_a_function_that_invokes_another_keeps_its_own_container_warm() -> None:
    # Given a function that reads its cached setting, invokes another function, and reads it again
    with mock_aws(), in_process():
        other = deploy_function("tests.fixtures.probe_pkg.handler.warm", {"PROBE_VALUE": "other"}, name="inner")
        outer = deploy_function("tests.fixtures.probe_pkg.handler.warm_around", {"PROBE_VALUE": "outer"}, name="outer")

        # When it runs
        payload = json.dumps({"other": other}).encode()
        answer = json.loads(boto3.client("lambda").invoke(FunctionName=outer, Payload=payload)["Payload"].read())

    # Then the nested invocation neither replaced nor emptied the caller's container
    assert answer["before"]["value"] == "outer"
    assert answer["after"] == answer["before"]


def test_handler_error_becomes_a_lambda_function_error() -> None:
    with mock_aws(), in_process() as calls:
        arn = deploy_function("tests.fixtures.probe_pkg.handler.fail")
        response = boto3.client("lambda").invoke(FunctionName=arn, Payload=json.dumps({"skill": "manga"}))
        assert response["FunctionError"] == "Handled"
        payload = json.loads(response["Payload"].read())
        assert payload["errorType"] == "AgentUnavailable"
        assert payload["errorMessage"] == "no agent for manga"
    assert type(calls.calls[0].error).__name__ == "AgentUnavailable"


def test_step_functions_task_runs_in_process_and_catches_by_error_name() -> None:
    with mock_aws(config=SFN_CONFIG), in_process() as calls:  # type: ignore[arg-type]
        ok = deploy_function("tests.fixtures.probe_pkg.handler.handler")
        bad = deploy_function("tests.fixtures.probe_pkg.handler.fail")
        definition = {
            "StartAt": "Echo",
            "States": {
                "Echo": {**_task(ok), "ResultPath": "$.echo", "Next": "Fail"},
                "Fail": {
                    **_task(bad),
                    "Catch": [{"ErrorEquals": ["AgentUnavailable"], "ResultPath": "$.error", "Next": "Caught"}],
                    "End": True,
                },
                "Caught": {"Type": "Pass", "End": True},
            },
        }
        described = _run(boto3.client("stepfunctions"), definition, {"skill": "manga"})
    assert described["status"] == "SUCCEEDED"
    output = json.loads(described["output"])
    assert output["echo"] == {"value": {"echo": {"skill": "manga"}}}
    assert output["error"]["Error"] == "AgentUnavailable"
    assert [c.handler.rsplit(".", 1)[1] for c in calls.calls] == ["handler", "fail"]


def test_fails_fast_on_an_unknown_handler() -> None:
    with mock_aws(), pytest.raises(ModuleNotFoundError):
        deploy_function("tests.fixtures.no_such_module.handler")


def test_the_bridge_names_the_gate_runtime_where_the_library_keeps_it() -> None:
    from constructs_lib.approval_gate import RUNTIME_PACKAGE
    from embedded.runtime import GATE_RUNTIME_PACKAGE, resolve_handler

    assert GATE_RUNTIME_PACKAGE == RUNTIME_PACKAGE
    assert resolve_handler("gate_runtime.request.handler").__module__ == f"{RUNTIME_PACKAGE}.request"


def test_standing_up_a_stage_loads_no_cdk() -> None:
    """The stage imports its runtime without the construct library (aws-cdk-lib starts a Node process)."""
    import subprocess
    import sys

    probe = (
        "import sys, embedded, embedded.stage\n"
        "print(sorted(m for m in sys.modules if m.startswith(('aws_cdk', 'jsii'))))"
    )
    loaded = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]"


def test_each_invocation_keeps_the_lines_its_powertools_logger_wrote() -> None:
    # Given a function whose Logger was created at import, before any invocation (its stream then the harness's)
    with mock_aws(), in_process() as calls:
        arn = deploy_function("tests.fixtures.probe_pkg.handler.log", {})
        client = boto3.client("lambda")
        # When it is invoked twice
        for say in ("first", "second"):
            client.invoke(FunctionName=arn, Payload=json.dumps({"say": say}).encode())
    # Then each invocation's output is its own log line, as its log stream in CloudWatch would be
    logged = [[json.loads(line)["message"] for line in call.output.splitlines()] for call in calls.calls]
    assert logged == [["first"], ["second"]]


def test_a_read_of_a_functions_settings_waits_for_the_invocation_in_flight_and_leaves_nothing_behind() -> None:
    # Given an invocation running on another thread (a workflow's task) with its function's variables
    entered, release = threading.Event(), threading.Event()

    def invocation() -> None:
        with function_environment({"PROBE_LEAK": "the invocation's"}):
            entered.set()
            release.wait(timeout=30)

    running = threading.Thread(target=invocation, daemon=True)
    running.start()
    assert entered.wait(timeout=30)
    # When a test reads another function's settings meanwhile
    reading = threading.Event()

    def reader() -> None:
        with function_environment({"PROBE_LEAK": "the reader's"}):
            reading.set()

    read = threading.Thread(target=reader, daemon=True)
    read.start()
    # Then it waits for the invocation (the two never take each other's variables) ...
    assert not reading.wait(timeout=0.2)
    release.set()
    running.join(timeout=30)
    read.join(timeout=30)
    assert reading.is_set()
    # ... and neither's variable is left in the process once both ended
    assert os.environ.get("PROBE_LEAK", "") == ""
