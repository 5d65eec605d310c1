"""The handoff metrics in the Events templates (dev and prod): the rule and the schedule with their
dead-letter queue and retries, least-privilege grants, the alarms with the stage's threshold, the
dashboard's graphs; and the construct's fail-fast grant."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms

from constructs_lib import SingleTable
from embedded.synth import SynthesizedStage

#: The stages' own thresholds, as cdk.json sets them.
P90_THRESHOLDS = {"dev": 120, "prod": 300}


def resources(stage: SynthesizedStage, part: str, type_: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in stage.templates[part]["Resources"].items() if v["Type"] == type_}


def only(stage: SynthesizedStage, type_: str, id_part: str) -> tuple[str, dict[str, Any]]:
    (found,) = [(k, v) for k, v in resources(stage, "Events", type_).items() if id_part in k]
    return found


def function_id(stage: SynthesizedStage, handler: str) -> str:
    (found,) = [
        k
        for k, v in resources(stage, "Events", "AWS::Lambda::Function").items()
        if v["Properties"]["Handler"] == handler
    ]
    return found


def policy_statements(stage: SynthesizedStage, function: str) -> list[dict[str, Any]]:
    role = resources(stage, "Events", "AWS::Lambda::Function")[function]["Properties"]["Role"]["Fn::GetAtt"][0]
    return [
        statement
        for policy in resources(stage, "Events", "AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_every_handoff_changed_event_reaches_the_handoff_metrics_with_dlq_and_retries(
    any_stage: SynthesizedStage,
) -> None:
    _, rule = only(any_stage, "AWS::Events::Rule", "HandoffChangedRule")
    props = rule["Properties"]
    assert props["EventPattern"] == {"source": ["mangaassist.sessions"], "detail-type": ["HandoffChanged"]}
    bus_id, _ = only(any_stage, "AWS::Events::EventBus", "SessionEvents")
    assert props["EventBusName"] == {"Ref": bus_id}
    (target,) = props["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [function_id(any_stage, "lambdas.events.handoff_metrics.handler"), "Arn"]}
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 8, "MaximumEventAgeInSeconds": 7200}
    dlq = target["DeadLetterConfig"]["Arn"]["Fn::GetAtt"][0]
    assert dlq in resources(any_stage, "Events", "AWS::SQS::Queue")


def test_the_sessions_gauge_runs_every_minute_with_dlq_and_retries(any_stage: SynthesizedStage) -> None:
    _, rule = only(any_stage, "AWS::Events::Rule", "GaugeSchedule")
    props = rule["Properties"]
    assert props["ScheduleExpression"] == "rate(1 minute)"
    (target,) = props["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [function_id(any_stage, "lambdas.events.sessions_gauge.handler"), "Arn"]}
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 2, "MaximumEventAgeInSeconds": 300}
    assert "DeadLetterConfig" in target


@pytest.mark.parametrize(
    ("handler", "retries"),
    [("lambdas.events.handoff_metrics.handler", 2), ("lambdas.events.sessions_gauge.handler", 0)],
)
def test_both_functions_keep_what_finally_failed_in_the_bus_dead_letter_queue(
    any_stage: SynthesizedStage, handler: str, retries: int
) -> None:
    function = function_id(any_stage, handler)
    (config,) = [
        c["Properties"]
        for c in resources(any_stage, "Events", "AWS::Lambda::EventInvokeConfig").values()
        if c["Properties"]["FunctionName"] == {"Ref": function}
    ]
    assert config["MaximumRetryAttempts"] == retries
    destination = config["DestinationConfig"]["OnFailure"]["Destination"]["Fn::GetAtt"][0]
    assert destination.startswith("SessionEventsTargetDeadLetterQueue")


def test_the_gauge_may_query_the_status_index_and_nothing_else_of_the_table(any_stage: SynthesizedStage) -> None:
    statements = policy_statements(any_stage, function_id(any_stage, "lambdas.events.sessions_gauge.handler"))
    dynamodb = [s for s in statements if any(str(a).startswith("dynamodb:") for a in _list(s["Action"]))]
    (query,) = dynamodb
    assert _list(query["Action"]) == ["dynamodb:Query"]
    (resource,) = _list(query["Resource"])
    assert json.dumps(resource).endswith('"/index/StatusIndex"]]}')


def test_the_handoff_metrics_function_touches_no_table_and_bounds_its_reasons(any_stage: SynthesizedStage) -> None:
    function = function_id(any_stage, "lambdas.events.handoff_metrics.handler")
    actions = {a for s in policy_statements(any_stage, function) for a in _list(s["Action"])}
    assert not [a for a in actions if a.startswith("dynamodb:")]
    env = resources(any_stage, "Events", "AWS::Lambda::Function")[function]["Properties"]["Environment"]["Variables"]
    assert env["METRIC_REASONS"] == "general,billing,orders,technical"
    assert "TABLE_NAME" not in env


def test_alarms_on_time_to_assignment_p90_over_the_stages_threshold_and_on_any_failed_handoff(
    any_stage: SynthesizedStage,
) -> None:
    alarms = {
        v["Properties"]["AlarmName"]: v["Properties"]
        for v in resources(any_stage, "Events", "AWS::CloudWatch::Alarm").values()
    }
    name = any_stage.stage.config.name
    slow = alarms[f"MangaAssist-{name}-Events-HandoffTimeToAssignmentP90"]
    assert (slow["MetricName"], slow["Namespace"], slow["ExtendedStatistic"]) == (
        "TimeToAssignment",
        "MangaAssist",
        "p90",
    )
    assert slow["Dimensions"] == [{"Name": "service", "Value": "HandoffMetrics"}]
    assert (slow["Threshold"], slow["Period"], slow["EvaluationPeriods"]) == (P90_THRESHOLDS[name], 300, 3)
    assert slow["ComparisonOperator"] == "GreaterThanThreshold"
    failed = alarms[f"MangaAssist-{name}-Events-HandoffsFailed"]
    assert (failed["MetricName"], failed["Statistic"], failed["Threshold"]) == ("HandoffsFailed", "Sum", 0)
    assert failed["ComparisonOperator"] == "GreaterThanThreshold"
    for alarm in (slow, failed):
        assert alarm["TreatMissingData"] == "notBreaching"
        assert alarm["AlarmActions"]
        assert alarm["AlarmActions"] == alarm["OKActions"]


def test_the_dashboard_graphs_the_handoff_metrics_and_the_sessions_in_progress(dev: SynthesizedStage) -> None:
    (dashboard,) = resources(dev, "Api", "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for name in (
        "HandoffsRequested",
        "HandoffsAssigned",
        "HandoffsEscalated",
        "HandoffsCompleted",
        "HandoffsFailed",
        "TimeToAssignment",
        "TimeToFirstReply",
        "HandoffDuration",
        "SessionsActive",
        "SessionsInHandoff",
        "Handoff metrics and sessions in progress",
    ):
        assert name in body, name
    assert "SEARCH(" in body
    assert "priority,reason,service" in body


def test_fails_on_an_index_query_grant_for_an_index_the_table_does_not_have() -> None:
    stack = Stack(App(), "T")
    table = SingleTable(stack, "Table", encryption_key=kms.Key(stack, "Key"))
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    with pytest.raises(ValueError, match=r"index_name must be one of the table's indexes .* \(given 'Nope'\)"):
        table.grant_index_query(role, "Nope")


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]
