"""The strict stage on a small hand-made template: a function, its role, an encrypted queue, a topic.

Each test deploys the template with one policy changed and checks what the function's call or
SNS's delivery gets: through, the service's own AccessDenied error naming the principal, action
and resource, or a refusal in the stage's report.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from embedded import EmbeddedStage, embedded_stage
from embedded.cloudformation.deploy import DeploymentError
from embedded.iam.access import Call, UnmappedOperation
from embedded.iam.caller import Caller
from embedded.stage import RefusedWhileWaiting
from tests.e2e import templates as t

pytestmark = pytest.mark.slow

ACCOUNT_ROOT = {"Fn::Sub": "arn:aws:iam::${AWS::AccountId}:root"}
SEND = "tests.fixtures.probe_pkg.handler.send"


def _statement(actions: list[str], resource: Any, **extra: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": actions, "Resource": resource, **extra}


def _resources(*, identity: list[dict[str, Any]], key_statements: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    key_policy = [{"Effect": "Allow", "Principal": {"AWS": ACCOUNT_ROOT}, "Action": "kms:*", "Resource": "*"}]
    return {
        "Key": {
            "Type": "AWS::KMS::Key",
            "Properties": {"KeyPolicy": {"Version": "2012-10-17", "Statement": key_policy + (key_statements or [])}},
        },
        "Queue": {"Type": "AWS::SQS::Queue", "Properties": {"KmsMasterKeyId": {"Fn::GetAtt": ["Key", "Arn"]}}},
        "Topic": {"Type": "AWS::SNS::Topic", "Properties": {}},
        "Subscription": {
            "Type": "AWS::SNS::Subscription",
            "Properties": {
                "TopicArn": {"Ref": "Topic"},
                "Protocol": "sqs",
                "Endpoint": {"Fn::GetAtt": ["Queue", "Arn"]},
                "RawMessageDelivery": True,
            },
        },
        "Role": t.role(),
        "RolePolicy": {
            "Type": "AWS::IAM::Policy",
            "Properties": {
                "PolicyName": "probe",
                "Roles": [{"Ref": "Role"}],
                "PolicyDocument": {"Version": "2012-10-17", "Statement": identity},
            },
        },
        "Probe": t.function(SEND),
    }


QUEUE = {"Fn::GetAtt": ["Queue", "Arn"]}
KEY = {"Fn::GetAtt": ["Key", "Arn"]}
#: Lambda writes the function's logs with its role
MAY_LOG = _statement(
    ["logs:CreateLogStream", "logs:PutLogEvents"], {"Fn::Sub": "arn:aws:logs:*:*:log-group:/aws/lambda/*"}
)
MAY_SEND = [
    _statement(["sqs:SendMessage"], QUEUE),
    _statement(["kms:GenerateDataKey", "kms:Decrypt"], KEY),
    MAY_LOG,
]


def _send(stage: EmbeddedStage) -> dict[str, Any]:
    queue = stage.only("AWS::SQS::Queue")
    outcome = stage.invoke(stage.function(SEND).name, {"queue_url": queue.ref})
    assert outcome.ok, outcome.payload
    result: dict[str, Any] = outcome.payload
    return result


def _queued(stage: EmbeddedStage) -> list[str]:
    return [m["Body"] for m in stage.queue_messages(stage.only("AWS::SQS::Queue"))]


def test_a_function_whose_role_may_send_and_use_the_key_sends() -> None:
    with embedded_stage([t.stack("T-Iam", "Events", _resources(identity=MAY_SEND))]) as stage:
        assert _send(stage) == {"sent": True}
        assert _queued(stage) == ["hello"]
        assert stage.refusals == []


def test_without_the_send_grant_the_function_gets_sqs_access_denied_naming_principal_action_and_queue() -> None:
    identity = [_statement(["kms:GenerateDataKey", "kms:Decrypt"], KEY), MAY_LOG]
    with embedded_stage([t.stack("T-Iam", "Events", _resources(identity=identity))]) as stage:
        result = _send(stage)
        queue_arn = stage.only("AWS::SQS::Queue").attributes["Arn"]
        assert result["sent"] is False
        assert result["code"] == "AccessDenied"
        assert "is not authorized to perform: sqs:SendMessage" in result["message"]
        assert f"on resource: {queue_arn}" in result["message"]
        assert ":assumed-role/" in result["message"]
        assert _queued(stage) == []
        assert [r.action for r in stage.refusals] == ["sqs:SendMessage"]


def test_a_wait_that_ends_on_refusal_stops_at_the_first_refusal_made_during_it() -> None:
    identity = [_statement(["kms:GenerateDataKey", "kms:Decrypt"], KEY), MAY_LOG]
    with embedded_stage([t.stack("T-Iam", "Events", _resources(identity=identity))]) as stage:
        _send(stage)  # refused before the waits below begin: it ends none of them
        with stage.waits_end_on_refusal():
            assert stage.settle(until=lambda: True) == 0
            with pytest.raises(TimeoutError):
                stage.settle(until=lambda: False, timeout=0)
            # A condition that never holds, whose check makes a refused call: the wait ends there.
            with pytest.raises(RefusedWhileWaiting, match=r"stopped waiting: AWS would refuse .*sqs:SendMessage"):
                stage.settle(until=lambda: _send(stage)["sent"], timeout=60)
        # Outside, a refusal never ends a wait: it runs to its timeout.
        with pytest.raises(TimeoutError):
            stage.settle(until=lambda: _send(stage)["sent"], timeout=0)
        assert [r.action for r in stage.refusals] == ["sqs:SendMessage"] * 3


def test_a_role_that_may_not_write_its_logs_runs_but_every_line_is_lost_and_reported() -> None:
    identity = MAY_SEND[:2]
    with embedded_stage([t.stack("T-Iam", "Events", _resources(identity=identity))]) as stage:
        assert _send(stage) == {"sent": True}
        _send(stage)  # decided once per function
        assert [(r.action, r.made_by.split(" of ")[0]) for r in stage.refusals] == [
            ("logs:CreateLogStream", "Lambda logs")
        ]


def test_without_the_key_grant_sqs_answers_kms_access_denied() -> None:
    identity = [_statement(["sqs:SendMessage"], QUEUE), MAY_LOG]
    with embedded_stage([t.stack("T-Iam", "Events", _resources(identity=identity))]) as stage:
        result = _send(stage)
        assert result["code"] == "KMS.AccessDeniedException"
        assert "kms:GenerateDataKey" in result["message"]
        assert _queued(stage) == []


def test_a_key_policy_that_does_not_delegate_to_iam_refuses_an_identity_grant() -> None:
    # Given a key whose policy names only another principal: IAM policies alone never open a key
    resources = _resources(identity=MAY_SEND)
    resources["Key"]["Properties"]["KeyPolicy"]["Statement"] = [
        {"Effect": "Allow", "Principal": {"Service": "sns.amazonaws.com"}, "Action": "kms:*", "Resource": "*"}
    ]
    with embedded_stage([t.stack("T-Iam", "Events", resources)]) as stage:
        assert _send(stage)["code"] == "KMS.AccessDeniedException"


def test_an_explicit_deny_in_the_queue_policy_wins_over_the_roles_allow() -> None:
    resources = _resources(identity=MAY_SEND)
    resources["QueuePolicy"] = {
        "Type": "AWS::SQS::QueuePolicy",
        "Properties": {
            "Queues": [{"Ref": "Queue"}],
            "PolicyDocument": {
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "sqs:SendMessage", "Resource": QUEUE}
                ],
            },
        },
    }
    with embedded_stage([t.stack("T-Iam", "Events", resources)]) as stage:
        result = _send(stage)
        assert result["code"] == "AccessDenied"
        assert "explicit" in result["message"].lower()


def _publish(stage: EmbeddedStage) -> None:
    stage.client("sns").publish(TopicArn=stage.only("AWS::SNS::Topic").ref, Message="from the topic")


def test_sns_delivers_to_an_encrypted_queue_only_when_the_queue_and_key_policies_let_it() -> None:
    # Given no queue policy for SNS: the delivery is refused, reported, and nothing arrives
    with embedded_stage([t.stack("T-Iam", "Events", _resources(identity=MAY_SEND))]) as stage:
        _publish(stage)
        assert _queued(stage) == []
        assert [(r.principal, r.action) for r in stage.refusals] == [("sns.amazonaws.com", "sqs:SendMessage")]

    # Given a queue policy for the topic but a key that does not let SNS in: refused at the key
    resources = _resources(identity=MAY_SEND)
    resources["QueuePolicy"] = _queue_policy_for_topic()
    with embedded_stage([t.stack("T-Iam", "Events", resources)]) as stage:
        _publish(stage)
        assert _queued(stage) == []
        assert [(r.principal, r.action) for r in stage.refusals] == [("sns.amazonaws.com", "kms:GenerateDataKey")]

    # Given both: the message arrives
    sns_key = {
        "Effect": "Allow",
        "Principal": {"Service": "sns.amazonaws.com"},
        "Action": ["kms:GenerateDataKey", "kms:Decrypt"],
        "Resource": "*",
        "Condition": {"ArnEquals": {"aws:SourceArn": {"Ref": "Topic"}}},
    }
    resources = _resources(identity=MAY_SEND, key_statements=[sns_key])
    resources["QueuePolicy"] = _queue_policy_for_topic()
    with embedded_stage([t.stack("T-Iam", "Events", resources)]) as stage:
        _publish(stage)
        assert _queued(stage) == ["from the topic"]
        assert stage.refusals == []


def _queue_policy_for_topic() -> dict[str, Any]:
    return {
        "Type": "AWS::SQS::QueuePolicy",
        "Properties": {
            "Queues": [{"Ref": "Queue"}],
            "PolicyDocument": {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "sns.amazonaws.com"},
                        "Action": "sqs:SendMessage",
                        "Resource": QUEUE,
                        "Condition": {"ArnEquals": {"aws:SourceArn": {"Ref": "Topic"}}},
                    }
                ],
            },
        },
    }


def test_the_operator_is_never_checked() -> None:
    # The code driving the stage (tests, the story, make local) acts as an administrator would
    with embedded_stage([t.stack("T-Iam", "Events", _resources(identity=[]))]) as stage:
        sqs = stage.client("sqs")
        sqs.send_message(QueueUrl=stage.only("AWS::SQS::Queue").ref, MessageBody="operator")
        assert _queued(stage) == ["operator"]
        assert stage.refusals == []


def test_an_operation_the_stage_cannot_authorize_fails_loudly_never_through() -> None:
    with embedded_stage([t.stack("T-Iam", "Events", _resources(identity=MAY_SEND))]) as stage:
        assert stage.guard is not None
        call = Call("sqs", "TagQueue", {"QueueUrl": stage.only("AWS::SQS::Queue").ref}, "us-east-1", "123456789012")
        caller = Caller(stage.guard.authority.function_roles[stage.function(SEND).name], "function probe")
        with pytest.raises(UnmappedOperation, match="sqs:TagQueue"):
            stage.guard.check(caller, call)


def test_a_function_whose_role_lambda_cannot_assume_is_not_deployed() -> None:
    resources = _resources(identity=MAY_SEND)
    resources["Role"] = copy.deepcopy(resources["Role"])
    resources["Role"]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] = {
        "Service": "states.amazonaws.com"
    }
    with (
        pytest.raises(DeploymentError, match=r"T-Iam/Probe.*lambda\.amazonaws\.com cannot assume"),
        embedded_stage([t.stack("T-Iam", "Events", resources)]),
    ):
        pass


# --- a state machine whose history is encrypted with a customer key ------------------------------

START = "tests.fixtures.probe_pkg.handler.start"
MACHINE = {"Ref": "Machine"}
HISTORY_KEY_USE = ["kms:GenerateDataKey", "kms:Decrypt"]


def _for_machine(machine: Any) -> dict[str, Any]:
    return {"StringEquals": {"kms:EncryptionContext:aws:states:stateMachineArn": machine}}


def _workflow_resources(*, caller: list[dict[str, Any]], runner: list[dict[str, Any]]) -> dict[str, Any]:
    resources = _resources(identity=[_statement(["states:StartExecution"], MACHINE), MAY_LOG, *caller])
    resources["Probe"] = t.function(START)
    resources["SfnRole"] = t.role("states.amazonaws.com")
    if runner:
        resources["SfnRolePolicy"] = {
            "Type": "AWS::IAM::Policy",
            "Properties": {
                "PolicyName": "runner",
                "Roles": [{"Ref": "SfnRole"}],
                "PolicyDocument": {"Version": "2012-10-17", "Statement": runner},
            },
        }
    machine = t.state_machine({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}, {})
    machine["Properties"]["EncryptionConfiguration"] = {"Type": "CUSTOMER_MANAGED_KMS_KEY", "KmsKeyId": KEY}
    resources["Machine"] = machine
    return resources


def _start(stage: EmbeddedStage) -> dict[str, Any]:
    machine = stage.only("AWS::StepFunctions::StateMachine").ref
    outcome = stage.invoke(stage.function(START).name, {"state_machine_arn": machine})
    assert outcome.ok, outcome.payload
    result: dict[str, Any] = outcome.payload
    return result


KEY_FOR_THIS_MACHINE = _statement(HISTORY_KEY_USE, KEY, Condition=_for_machine(MACHINE))


def test_an_encrypted_workflow_starts_when_caller_and_execution_role_may_use_its_key_for_it() -> None:
    resources = _workflow_resources(caller=[KEY_FOR_THIS_MACHINE], runner=[KEY_FOR_THIS_MACHINE])
    with embedded_stage([t.stack("T-Iam", "Events", resources)]) as stage:
        assert _start(stage) == {"started": True}
        assert stage.refusals == []


@pytest.mark.parametrize(
    "caller",
    [
        pytest.param([], id="no-key-grant"),
        pytest.param(
            [
                _statement(
                    HISTORY_KEY_USE,
                    KEY,
                    Condition=_for_machine("arn:aws:states:us-east-1:123456789012:stateMachine:other"),
                )
            ],
            id="key-granted-for-another-machine",
        ),
    ],
)
def test_a_caller_that_may_not_use_the_history_key_for_this_machine_gets_kms_access_denied(
    caller: list[dict[str, Any]],
) -> None:
    resources = _workflow_resources(caller=caller, runner=[KEY_FOR_THIS_MACHINE])
    with embedded_stage([t.stack("T-Iam", "Events", resources)]) as stage:
        result = _start(stage)
        assert result["started"] is False
        assert result["code"] == "KmsAccessDeniedException"
        assert [r.action for r in stage.refusals] == ["kms:GenerateDataKey"]
        machine = stage.only("AWS::StepFunctions::StateMachine").ref
        assert stage.client("stepfunctions").list_executions(stateMachineArn=machine)["executions"] == []


def test_an_execution_role_that_may_not_use_the_history_key_is_refused_and_named() -> None:
    resources = _workflow_resources(caller=[KEY_FOR_THIS_MACHINE], runner=[])
    with embedded_stage([t.stack("T-Iam", "Events", resources)]) as stage:
        result = _start(stage)
        assert result["code"] == "KmsAccessDeniedException"
        assert [(r.action, r.made_by.split(" of ")[0]) for r in stage.refusals] == [
            ("kms:GenerateDataKey", "Step Functions running an execution")
        ]
