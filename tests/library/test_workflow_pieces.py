"""WorkflowStateMachine, WorkflowOptions and StepFunctionsStartExecution on their own, outside the app."""

from __future__ import annotations

import pytest
from aws_cdk import App, Duration, RemovalPolicy, Stack
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Match, Template

from constructs_lib import InputField, StepFunctionsStartExecution, WorkflowOptions, WorkflowStateMachine


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
