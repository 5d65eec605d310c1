"""ServiceAlarms and OpsDashboard on a small test stack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Template

from constructs_lib import SharedFunction
from constructs_lib.ops_dashboard import OpsDashboard
from constructs_lib.service_alarms import ServiceAlarms

PROBE = Path(__file__).resolve().parents[1] / "fixtures" / "probe_pkg"


@pytest.fixture(scope="module")
def template() -> Template:
    stack = Stack(App(), "Ops")
    topic = sns.Topic(stack, "Ops")
    function = SharedFunction(stack, "Fn", code_root=PROBE, handler="probe_pkg.handler.handler").function
    queue = sqs.Queue(stack, "Dlq")
    machine = sfn.StateMachine(stack, "Flow", definition_body=sfn.DefinitionBody.from_chainable(sfn.Pass(stack, "P")))
    api = apigw.RestApi(stack, "Api", rest_api_name="probe-api")
    api.root.add_method("GET", apigw.MockIntegration())
    table = dynamodb.Table(
        stack, "Table", partition_key=dynamodb.Attribute(name="PK", type=dynamodb.AttributeType.STRING)
    )

    alarms = ServiceAlarms(stack, "Alarms", topic=topic, prefix="Probe-dev")
    alarms.watch_function(function, "Router", runbook="Read the router's logs.")
    alarms.watch_stream_consumer(function, "Router")
    alarms.watch_dead_letter_queue(queue, "RouterDlq", runbook="Inspect and redrive.")
    alarms.watch_state_machine(machine, "Handoff", runbook="Open the failed execution.")
    alarms.watch_rest_api(api, "RestApi")
    alarms.watch_table(table, "Sessions")
    board = OpsDashboard(stack, "Dashboard", alarms=alarms.alarms)
    board.add_row("Functions", [("Errors", [function.metric_errors()]), ("Duration", [function.metric_duration()])])
    return Template.from_stack(stack)


EXPECTED = [
    "RouterErrors",
    "RouterThrottles",
    "RouterIteratorAge",
    "RouterDlqMessages",
    "HandoffExecutionsFailed",
    "HandoffExecutionsTimedOut",
    "RestApiServerErrorRate",
    "RestApiLatencyP99",
    "SessionsThrottledRequests",
]


def _alarms(template: Template) -> dict[str, dict[str, Any]]:
    return {
        a["Properties"]["AlarmName"]: a["Properties"]
        for a in template.find_resources("AWS::CloudWatch::Alarm").values()
    }


def test_every_alarm_is_named_described_with_a_runbook_and_notifies_the_topic(template: Template) -> None:
    alarms = _alarms(template)
    (topic,) = template.find_resources("AWS::SNS::Topic")
    assert sorted(alarms) == sorted(f"Probe-dev-{name}" for name in EXPECTED)
    for name, props in alarms.items():
        assert "\nRunbook: " in props["AlarmDescription"], name
        assert [a["Ref"] for a in props["AlarmActions"]] == [topic], name
        assert props["OKActions"] == props["AlarmActions"], name
        assert props["TreatMissingData"] == "notBreaching", name


def test_iterator_age_threshold_is_sixty_seconds(template: Template) -> None:
    props = _alarms(template)["Probe-dev-RouterIteratorAge"]
    assert (props["MetricName"], props["Statistic"], props["Threshold"]) == ("IteratorAge", "Maximum", 60000)


def test_dlq_alarm_fires_on_any_visible_message(template: Template) -> None:
    props = _alarms(template)["Probe-dev-RouterDlqMessages"]
    assert props["MetricName"] == "ApproximateNumberOfMessagesVisible"
    assert (props["Threshold"], props["ComparisonOperator"]) == (0, "GreaterThanThreshold")


def test_api_error_rate_is_a_ratio_of_5xx_to_requests(template: Template) -> None:
    props = _alarms(template)["Probe-dev-RestApiServerErrorRate"]
    expressions = [m.get("Expression") for m in props["Metrics"]]
    assert "IF(requests > 0, errors / requests, 0)" in expressions
    assert props["Threshold"] == 0.05


def test_dashboard_shows_the_alarms_and_the_rows(template: Template) -> None:
    body = template.find_resources("AWS::CloudWatch::Dashboard")
    assert len(body) == 1
    rendered = str(next(iter(body.values()))["Properties"]["DashboardBody"])
    assert "alarms" in rendered
    assert "## Functions" in rendered


_METRIC = cloudwatch.Metric(namespace="Probe", metric_name="Count")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda a: a.alarm("Bad-Id", metric=_METRIC, threshold=0, description="d", runbook="r"), "PascalCase"),
        (lambda a: a.alarm("NoRunbook", metric=_METRIC, threshold=0, description="d", runbook=" "), "runbook line"),
        (
            lambda a: a.watch_rest_api(apigw.RestApi.from_rest_api_id(a, "Api", "abc123"), "Api", error_rate=5),
            r"error_rate must be a fraction in \(0, 1\) \(given 5\)",
        ),
    ],
)
def test_fails_on_bad_alarm_props(call: Any, message: str) -> None:
    stack = Stack(App(), "Bad")
    alarms = ServiceAlarms(stack, "Alarms", topic=sns.Topic(stack, "T"), prefix="X")
    call(alarms)
    with pytest.raises(RuntimeError, match=r"\[Bad/Alarms\] .*" + message):
        Template.from_stack(stack)


def test_fails_on_a_bad_prefix_or_row() -> None:
    stack = Stack(App(), "Bad")
    ServiceAlarms(stack, "Alarms", topic=sns.Topic(stack, "T"), prefix="a b")
    with pytest.raises(RuntimeError, match=r"\[Bad/Alarms\] prefix must be letters, digits and dashes \(given 'a b'\)"):
        Template.from_stack(stack)
    board_stack = Stack(App(), "Board")
    board = OpsDashboard(board_stack, "Board")
    board.add_row("Empty", [])
    with pytest.raises(RuntimeError, match=r"\[Board/Board\] a row holds 1..4 graphs \(given 0 for 'Empty'\)"):
        Template.from_stack(board_stack)


def test_deliberate_errors_are_left_out_of_the_errors_alarm() -> None:
    """A TOKEN authorizer fails on purpose for each refused token: those must page nobody."""
    stack = Stack(App(), "Ops")
    function = SharedFunction(stack, "Fn", code_root=PROBE, handler="probe_pkg.handler.handler").function
    refused = cloudwatch.Metric(namespace="Probe", metric_name="TokensRefused", statistic="Sum")
    ServiceAlarms(stack, "Alarms", topic=sns.Topic(stack, "T"), prefix="Probe-dev").watch_function(
        function, "Authorizer", runbook="Read the authorizer's logs.", deliberate_errors=refused
    )

    errors = _alarms(Template.from_stack(stack))["Probe-dev-AuthorizerErrors"]
    expression = next(m for m in errors["Metrics"] if "Expression" in m)
    assert expression["Expression"] == "FILL(errors, 0) - FILL(deliberate, 0)"
    assert expression["ReturnData"] is True
    inputs = {m["Id"]: m["MetricStat"]["Metric"] for m in errors["Metrics"] if "MetricStat" in m}
    assert inputs["errors"]["MetricName"] == "Errors"
    assert inputs["deliberate"] == {"Namespace": "Probe", "MetricName": "TokensRefused"}
    assert errors["Threshold"] == 0
