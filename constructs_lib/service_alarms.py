"""Alarms for a serverless system: one call per thing to watch, every alarm to one ops topic.

Each alarm gets a clear name (``<prefix>-<what>``), a description whose last line is the runbook
line (what to do), treats missing data as not breaching, and notifies the ops topic on ALARM and
on OK, so the on-call sees both edges.
"""

from __future__ import annotations

from aws_cdk import Duration, Token
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from constructs_lib.validation import PropErrors


class ServiceAlarms(Construct):
    """A set of CloudWatch alarms that all notify one topic.

    Example::

        alarms = ServiceAlarms(self, "Alarms", topic=ops_topic, prefix="Orders-dev")
        alarms.watch_function(worker.function, "Worker", runbook="Check the worker's logs ...")
        alarms.watch_dead_letter_queue(dlq, "WorkerDlq", runbook="Inspect, fix, redrive ...")

    Args:
        topic: where every alarm and its recovery is sent.
        prefix: start of every alarm name (e.g. the stage's stack prefix); required so two
            stages in one account never share alarm names.
        period: evaluation period of every alarm. Defaults to one minute.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, topic: sns.ITopic, prefix: str, period: Duration | None = None
    ) -> None:
        super().__init__(scope, construct_id)
        errors = self._errors = PropErrors(self)
        errors.check(
            Token.is_unresolved(prefix) or bool(prefix and prefix.replace("-", "").isalnum()),
            f"prefix must be letters, digits and dashes (given {prefix!r})",
        )
        self.topic = topic
        self.prefix = prefix
        self.period = period or Duration.minutes(1)
        self.alarms: list[cloudwatch.Alarm] = []
        # One action for every alarm of the set: it only names the topic, and each new one would
        # cost jsii round trips at synth for nothing.
        self._notify = actions.SnsAction(topic)

    # --- generic -------------------------------------------------------------------------------

    def alarm(
        self,
        construct_id: str,
        *,
        metric: cloudwatch.IMetric,
        threshold: float,
        description: str,
        runbook: str,
        comparison: cloudwatch.ComparisonOperator = cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluation_periods: int = 1,
    ) -> cloudwatch.Alarm:
        """One alarm on any metric; the name is ``<prefix>-<construct_id>``."""
        self._errors.check(
            construct_id.isalnum(), f"alarm id must be PascalCase letters/digits (given {construct_id!r})"
        )
        self._errors.check(bool(runbook.strip()), f"alarm {construct_id}: a runbook line is required (given none)")
        alarm = cloudwatch.Alarm(
            self,
            construct_id,
            alarm_name=f"{self.prefix}-{construct_id}",
            alarm_description=f"{description}\nRunbook: {runbook}",
            metric=metric,
            threshold=threshold,
            comparison_operator=comparison,
            evaluation_periods=evaluation_periods,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarm.add_alarm_action(self._notify)
        alarm.add_ok_action(self._notify)
        self.alarms.append(alarm)
        return alarm

    # --- by resource ---------------------------------------------------------------------------

    def watch_function(
        self,
        function: lambda_.IFunction,
        name: str,
        *,
        runbook: str,
        deliberate_errors: cloudwatch.IMetric | None = None,
    ) -> None:
        """Errors > 0 and throttles > 0 of one function.

        ``deliberate_errors`` counts invocations that fail on purpose (a TOKEN authorizer raises
        ``Unauthorized`` for API Gateway to answer 401, and Lambda counts each as an error): the
        errors alarm then watches the errors beyond them (``errors - deliberate``, missing
        points as 0), so a refused token pages nobody and any other failure still does.
        """
        errors: cloudwatch.IMetric = function.metric_errors(period=self.period, statistic="Sum")
        if deliberate_errors is not None:
            errors = cloudwatch.MathExpression(
                expression="FILL(errors, 0) - FILL(deliberate, 0)",
                using_metrics={"errors": errors, "deliberate": deliberate_errors},
                label=f"{name} errors beyond the deliberate ones",
                period=self.period,
            )
        self.alarm(
            f"{name}Errors",
            metric=errors,
            threshold=0,
            description=f"{name}: the function raised errors.",
            runbook=runbook,
        )
        self.alarm(
            f"{name}Throttles",
            metric=function.metric_throttles(period=self.period, statistic="Sum"),
            threshold=0,
            description=f"{name}: invocations were throttled (concurrency limit reached).",
            runbook="Check account/reserved concurrency and the invocation rate; raise the limit or smooth the load.",
        )

    def watch_stream_consumer(self, function: lambda_.IFunction, name: str, *, max_age: Duration | None = None) -> None:
        """IteratorAge above ``max_age`` (60 s by default): the stream consumer is falling behind."""
        age = max_age or Duration.seconds(60)
        self.alarm(
            f"{name}IteratorAge",
            metric=function.metric("IteratorAge", period=self.period, statistic="Maximum"),
            threshold=age.to_milliseconds(),
            description=f"{name}: stream records wait more than {age.to_seconds():g} s before processing.",
            runbook="Check the consumer's errors and duration; records older than the maximum age go to its DLQ.",
        )

    def watch_dead_letter_queue(self, queue: sqs.IQueue, name: str, *, runbook: str) -> None:
        """Any visible message in a DLQ means something was not processed."""
        self.alarm(
            f"{name}Messages",
            metric=queue.metric_approximate_number_of_messages_visible(period=self.period, statistic="Maximum"),
            threshold=0,
            description=f"{name}: messages are waiting in a dead-letter queue.",
            runbook=runbook,
        )

    def watch_state_machine(self, machine: sfn.IStateMachine, name: str, *, runbook: str) -> None:
        """Failed and timed-out executions of one workflow."""
        self.alarm(
            f"{name}ExecutionsFailed",
            metric=machine.metric_failed(period=self.period, statistic="Sum"),
            threshold=0,
            description=f"{name}: executions failed.",
            runbook=runbook,
        )
        self.alarm(
            f"{name}ExecutionsTimedOut",
            metric=machine.metric_timed_out(period=self.period, statistic="Sum"),
            threshold=0,
            description=f"{name}: executions hit their overall timeout.",
            runbook=f"{runbook} A timeout usually means a waited-for callback (task token) never came.",
        )

    def watch_rest_api(
        self, api: apigw.IRestApi, name: str, *, error_rate: float = 0.05, p99_latency: Duration | None = None
    ) -> None:
        """5XX rate above ``error_rate`` over 5 minutes and p99 latency above ``p99_latency`` (3 s)."""
        if not self._errors.check(0 < error_rate < 1, f"error_rate must be a fraction in (0, 1) (given {error_rate})"):
            error_rate = 0.05
        latency = p99_latency or Duration.seconds(3)
        five = Duration.minutes(5)
        rate = cloudwatch.MathExpression(
            expression="IF(requests > 0, errors / requests, 0)",
            using_metrics={
                "errors": apigw_metric(api, "5XXError", "Sum", five),
                "requests": apigw_metric(api, "Count", "SampleCount", five),
            },
            period=five,
            label=f"{name} 5XX rate",
        )
        self.alarm(
            f"{name}ServerErrorRate",
            metric=rate,
            threshold=error_rate,
            description=f"{name}: more than {error_rate:.0%} of requests answered 5XX over 5 minutes.",
            runbook="Find the failing route in the access logs (status 5xx), then the integration behind it.",
        )
        self.alarm(
            f"{name}LatencyP99",
            metric=apigw_metric(api, "Latency", "p99", five),
            threshold=latency.to_milliseconds(),
            description=f"{name}: p99 latency above {latency.to_seconds():g} s over 5 minutes.",
            runbook="Check the slowest integration's duration (X-Ray traces) and DynamoDB throttling.",
            evaluation_periods=2,
        )

    def watch_table(self, table: dynamodb.ITable, name: str) -> None:
        """Throttled requests on the table (any operation)."""
        self.alarm(
            f"{name}ThrottledRequests",
            metric=cloudwatch.Metric(
                namespace="AWS/DynamoDB",
                metric_name="ThrottledRequests",
                dimensions_map={"TableName": table.table_name},
                period=self.period,
                statistic="Sum",
            ),
            threshold=0,
            description=f"{name}: DynamoDB throttled requests.",
            runbook="On-demand tables throttle on hot partitions or sudden 2x peaks: check key design and callers.",
        )


def apigw_metric(api: apigw.IRestApi, metric_name: str, statistic: str, period: Duration) -> cloudwatch.Metric:
    """A REST API metric by API name (the dimension API Gateway publishes)."""
    return cloudwatch.Metric(
        namespace="AWS/ApiGateway",
        metric_name=metric_name,
        dimensions_map={"ApiName": api.rest_api_name},
        statistic=statistic,
        period=period,
    )
