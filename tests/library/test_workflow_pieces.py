"""WorkflowStateMachine, WorkflowOptions and StepFunctionsStartExecution on their own, outside the app."""

from __future__ import annotations

import pytest
from aws_cdk import App, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Match, Template

from constructs_lib import InputField, StepFunctionsStartExecution, WorkflowOptions, WorkflowStateMachine
from constructs_lib.workflow_defaults import grant_history_key


def _machine(stack: Stack, construct_id: str = "Flow", **kwargs: object) -> WorkflowStateMachine:
    options = kwargs.pop("options", None) or WorkflowOptions(encryption_key=kms.Key(stack, f"{construct_id}Key"))
    return WorkflowStateMachine(
        stack,
        construct_id,
        definition=sfn.Pass(stack, f"{construct_id}Start"),
        options=options,  # type: ignore[arg-type]
        **kwargs,  # type: ignore[arg-type]
    )


def test_a_standard_workflow_defaults_to_one_hour_logs_tracing_and_two_alarms() -> None:
    stack = Stack(App(), "Standard")
    _machine(stack)

    template = Template.from_stack(stack)

    template.has_resource_properties(
        "AWS::StepFunctions::StateMachine",
        {
            "StateMachineType": "STANDARD",
            "DefinitionString": Match.string_like_regexp('"TimeoutSeconds":3600'),
            "TracingConfiguration": {"Enabled": True},
            "LoggingConfiguration": Match.object_like({"Level": "ALL", "IncludeExecutionData": False}),
        },
    )
    template.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 7, "KmsKeyId": Match.any_value()})
    template.resource_count_is("AWS::CloudWatch::Alarm", 2)


def test_an_express_workflow_takes_the_same_options_and_defaults_to_five_minutes() -> None:
    stack = Stack(App(), "Express")
    options = WorkflowOptions(
        encryption_key=kms.Key(stack, "Key"),
        log_retention=logs.RetentionDays.ONE_MONTH,
        include_execution_data=True,
        removal_policy=RemovalPolicy.RETAIN,
    )
    machine = _machine(stack, options=options, state_machine_type=sfn.StateMachineType.EXPRESS)

    template = Template.from_stack(stack)

    template.has_resource_properties(
        "AWS::StepFunctions::StateMachine",
        {
            "StateMachineType": "EXPRESS",
            "DefinitionString": Match.string_like_regexp('"TimeoutSeconds":300'),
            "LoggingConfiguration": Match.object_like({"IncludeExecutionData": True}),
        },
    )
    template.has_resource(
        "AWS::Logs::LogGroup",
        {"DeletionPolicy": "Retain", "Properties": {"RetentionInDays": 30, "KmsKeyId": Match.any_value()}},
    )
    assert machine.executions_timed_out_alarm is not None


def test_with_timeout_changes_only_the_timeout() -> None:
    stack = Stack(App(), "Options")
    options = WorkflowOptions(encryption_key=kms.Key(stack, "Key"), include_execution_data=True)

    longer = options.with_timeout(Duration.hours(2))

    assert longer.timeout is not None
    assert longer.timeout.to_seconds() == 7200
    assert (longer.encryption_key, longer.include_execution_data, longer.retry) == (
        options.encryption_key,
        True,
        options.retry,
    )
    assert options.timeout is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"state_machine_type": sfn.StateMachineType.EXPRESS, "timeout": Duration.minutes(6)},
            r"timeout must be 1 s\.\.5 min for an Express workflow \(given 360 s\)",
        ),
        ({"timeout": Duration.days(400)}, r"timeout must be 1 s\.\.1 year \(given 34560000 s\)"),
        ({"failed_alarm_threshold": 0}, r"failed_alarm_threshold must be >= 1 \(given 0\)"),
    ],
)
def test_fails_on_workflow_settings_out_of_range(kwargs: dict[str, object], message: str) -> None:
    app = App()
    stack = Stack(app, "Bad")
    timeout = kwargs.pop("timeout", None)
    _machine(stack, options=WorkflowOptions(encryption_key=kms.Key(stack, "Key"), timeout=timeout), **kwargs)  # type: ignore[arg-type]

    with pytest.raises(RuntimeError, match=r"\[Bad/Flow\] " + message):
        app.synth()


def test_fails_on_start_execution_fields_that_would_break_its_template() -> None:
    app = App()
    stack = Stack(app, "Api")
    StepFunctionsStartExecution(
        stack,
        "Start",
        state_machine=_machine(stack).state_machine,
        input_fields={"bad-name": InputField.path("id"), "x": InputField.body("a.b")},
    )

    with pytest.raises(RuntimeError) as raised:
        app.synth()

    assert "[Api/Start] input field name must match" in str(raised.value)
    assert "[Api/Start] body name of input field 'x' must match" in str(raised.value)


def _history_key_statements(template: Template, policy_id_prefix: str = "") -> list[dict[str, object]]:
    found = []
    for logical_id, policy in template.find_resources("AWS::IAM::Policy").items():
        if not logical_id.startswith(policy_id_prefix):
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            condition = statement.get("Condition", {}).get("StringEquals", {})
            if "kms:EncryptionContext:aws:states:stateMachineArn" in condition:
                found.append(statement)
    return found


def test_execution_history_is_encrypted_with_the_options_key_and_the_role_may_use_it_for_this_machine() -> None:
    stack = Stack(App(), "History")
    machine = _machine(stack)

    template = Template.from_stack(stack)

    key_id = stack.get_logical_id(stack.node.find_child("FlowKey").node.default_child)  # type: ignore[arg-type]
    template.has_resource_properties(
        "AWS::StepFunctions::StateMachine",
        {
            "EncryptionConfiguration": {
                "Type": "CUSTOMER_MANAGED_KMS_KEY",
                "KmsKeyId": {"Fn::GetAtt": [key_id, "Arn"]},
                "KmsDataKeyReusePeriodSeconds": 300,
            }
        },
    )
    machine_ref = {"Ref": stack.get_logical_id(machine.state_machine.node.default_child)}  # type: ignore[arg-type]
    own = [
        s
        for s in _history_key_statements(template, "FlowHistoryKeyPolicy")
        if s["Condition"] == {"StringEquals": {"kms:EncryptionContext:aws:states:stateMachineArn": machine_ref}}
    ]
    assert [sorted(s["Action"]) for s in own] == [["kms:Decrypt", "kms:GenerateDataKey"]]  # type: ignore[call-overload]


def test_starting_reading_and_answering_tasks_grant_the_history_key_for_this_machine_only() -> None:
    stack = Stack(App(), "Grants")
    machine = _machine(stack)
    starter = iam.Role(stack, "Starter", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    reader = iam.Role(stack, "Reader", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    agent = iam.Role(stack, "Agent", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    machine.grant_start_execution(starter)
    machine.grant_read(reader)
    machine.grant_task_response(agent)
    StepFunctionsStartExecution(
        stack, "Start", state_machine=machine.state_machine, input_fields={"id": InputField.path("id")}
    )

    template = Template.from_stack(stack)

    machine_ref = {"Ref": stack.get_logical_id(machine.state_machine.node.default_child)}  # type: ignore[arg-type]
    expected = {
        "Starter": ["kms:Decrypt", "kms:GenerateDataKey"],
        "Reader": ["kms:Decrypt"],
        "Agent": ["kms:Decrypt", "kms:GenerateDataKey"],
        "StartRole": ["kms:Decrypt", "kms:GenerateDataKey"],
    }
    for prefix, actions in expected.items():
        statements = _history_key_statements(template, prefix)
        assert len(statements) == 1, prefix
        statement = statements[0]
        granted = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        assert sorted(granted) == actions, prefix
        assert statement["Condition"] == {
            "StringEquals": {"kms:EncryptionContext:aws:states:stateMachineArn": machine_ref}
        }


def test_a_machine_with_aws_owned_encryption_grants_no_key() -> None:
    stack = Stack(App(), "Owned")
    machine = sfn.StateMachine(stack, "Plain", definition_body=sfn.DefinitionBody.from_chainable(sfn.Pass(stack, "P")))
    role = iam.Role(stack, "Starter", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    grant_history_key(role, machine, ["states:StartExecution"])

    assert _history_key_statements(Template.from_stack(stack)) == []
