"""What measures handoffs and the sessions in progress: two metric functions, their triggers and alarms."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from constructs import Construct

from constructs_lib import SecureEventBus, ServiceAlarms, SharedFunction, SingleTable
from contracts import messages
from contracts.schema import SESSIONS_BY_STATUS
from stacks.config import StageConfig
from stacks.functions import StageFunctions, service_metric

#: The functions' construct ids, which are also their metrics' ``service`` dimension.
HANDOFF_METRICS = "HandoffMetrics"
SESSIONS_GAUGE = "SessionsGauge"
#: How often the sessions in progress are counted.
GAUGE_RATE = Duration.minutes(1)

HANDOFF_COUNTS = ("HandoffsRequested", "HandoffsAssigned", "HandoffsEscalated", "HandoffsCompleted", "HandoffsFailed")
HANDOFF_TIMES = ("TimeToAssignment", "TimeToFirstReply", "HandoffDuration")
GAUGES = ("SessionsActive", "SessionsInHandoff")


def handoff_changed_pattern() -> events.EventPattern:
    """Every ``HandoffChanged`` event of the bus (one per change of a handoff record the metrics count)."""
    return events.EventPattern(source=[messages.EVENT_SOURCE], detail_type=[messages.HANDOFF_CHANGED])


class HandoffMetrics(Construct):
    """Handoff metrics from the bus, a gauge of the sessions in progress from the table, their alarms.

    Example::

        metrics = HandoffMetrics(self, "HandoffMetrics", config=config, bus=event_bus,
                                 sessions=storage.sessions, functions=functions)
        metrics.add_alarms(alarms)

    * ``Function`` (``HandoffMetrics``) on the rule ``HandoffChangedRule``: one invocation per
      ``HandoffChanged`` event, with the bus's retry policy and dead-letter queue (for the rule and
      for the function's own asynchronous retries). The seed's rule on a session entering
      ``handoff`` is not enough: that event has no reason, priority or handoff timestamps, and a
      session enters ``handoff`` only once an agent is assigned, after the request and any wait.
    * ``GaugeFunction`` (``SessionsGauge``) on ``GaugeSchedule`` (every minute): counts the active
      and handed-over sessions on the sparse StatusIndex; it may Query that index and nothing else.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        bus: SecureEventBus,
        sessions: SingleTable,
        functions: StageFunctions,
    ) -> None:
        super().__init__(scope, construct_id)
        self._config = config
        dead_letters = bus.dead_letter_queue
        self.function: SharedFunction = functions(
            self,
            HANDOFF_METRICS,
            "lambdas.events.handoff_metrics.handler",
            {"METRIC_REASONS": ",".join(config.handoff_metric_reasons)},
            on_failure=dead_letters,
            retry_attempts=2,
        )
        self.rule: events.Rule = bus.route_to_function(
            "HandoffChangedRule",
            event_pattern=handoff_changed_pattern(),
            function=self.function.function,
            description="HandoffChanged: a handoff was requested, assigned, escalated, answered or closed -> metrics",
        )
        self.gauge_function: SharedFunction = functions(
            self,
            SESSIONS_GAUGE,
            "lambdas.events.sessions_gauge.handler",
            {"TABLE_NAME": sessions.table.table_name},
            on_failure=dead_letters,
            retry_attempts=0,  # a late count is worth nothing: the next minute counts again
        )
        sessions.grant_index_query(self.gauge_function.function, SESSIONS_BY_STATUS.name)
        self.schedule: events.Rule = events.Rule(
            self,
            "GaugeSchedule",
            description="Every minute: count the sessions in progress (active, handed over) into gauges",
            schedule=events.Schedule.rate(GAUGE_RATE),
            targets=[
                targets.LambdaFunction(
                    self.gauge_function.function,
                    dead_letter_queue=dead_letters,
                    retry_attempts=2,
                    max_event_age=Duration.minutes(5),
                )
            ],
        )

    def add_alarms(self, alarms: ServiceAlarms) -> list[cloudwatch.Alarm]:
        """The handoff alarms: time to assignment p90 over the stage's threshold, any handoff failed."""
        threshold = self._config.handoff_assignment_p90_alarm_seconds
        return [
            alarms.alarm(
                "HandoffTimeToAssignmentP90",
                metric=metric("TimeToAssignment", statistic="p90", period=Duration.minutes(5)),
                threshold=threshold,
                evaluation_periods=3,
                description=f"Customers wait too long for an agent: time to assignment p90 over {threshold} s "
                "for 15 minutes.",
                runbook="Compare HandoffsRequested with the agents available (agent registry, their status); "
                "page more agents or managers, and check HandoffsEscalated and the handoff workflow's executions.",
            ),
            alarms.alarm(
                "HandoffsFailed",
                metric=metric("HandoffsFailed", period=Duration.minutes(5)),
                threshold=0,
                description="A handoff failed: no agent or manager took it, or a step of the workflow failed.",
                runbook="The handoff workflow's failed executions (Step Functions console) name the cause; the "
                "customer was told. Check agent availability and the HandoffFailed step's log line (reason).",
            ),
        ]

    def graphs(self) -> list[tuple[str, list[cloudwatch.IMetric]]]:
        """Dashboard graphs: handoff counts, the times (p50/p90), the sessions in progress."""
        minutes = Duration.minutes(5)
        return [
            ("Handoffs (per 5 min)", [metric(name, period=minutes) for name in HANDOFF_COUNTS]),
            (
                "Handoff times p50 / p90 (s)",
                [metric(name, statistic=stat, period=minutes) for name in HANDOFF_TIMES for stat in ("p50", "p90")],
            ),
            (
                "Time to assignment p90 by reason and priority (s)",
                [
                    cloudwatch.MathExpression(
                        expression=f"SEARCH('{{{_namespace()},priority,reason,service}} "
                        f'service="{HANDOFF_METRICS}" MetricName="TimeToAssignment"\', \'p90\', 300)',
                        label="",
                        period=minutes,
                    )
                ],
            ),
            ("Sessions in progress", [gauge(name) for name in GAUGES]),
        ]


def _namespace() -> str:
    return service_metric(HANDOFF_METRICS, "x").namespace


def metric(name: str, *, statistic: str = "Sum", period: Duration | None = None) -> cloudwatch.Metric:
    """A handoff metric by ``service`` alone (over every reason and priority)."""
    return service_metric(HANDOFF_METRICS, name).with_(statistic=statistic, period=period or Duration.minutes(5))


def gauge(name: str) -> cloudwatch.Metric:
    """A sessions-in-progress gauge (the latest count of each minute)."""
    return service_metric(SESSIONS_GAUGE, name).with_(statistic="Maximum", period=GAUGE_RATE)
