"""The stage's one dashboard over all four stacks: alarms, traffic, chat and handoffs, stream and DLQs, workflows, cost.

Built last in the API stack, after both APIs and the stack's alarms.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from constructs_lib import OpsDashboard
from stacks.apis.rest import MangaAssistRestApi
from stacks.apis.websocket import MESSAGE_FUNCTION, ChatApi, model_fallbacks
from stacks.events_stack import EventsStack
from stacks.functions import service_metric
from stacks.operations import dead_letter_queues
from stacks.orchestration_stack import OrchestrationStack
from stacks.storage_stack import StorageStack

Graphs = list[tuple[str, list[cloudwatch.IMetric]]]


class StageDashboard(Construct):
    """The stage's dashboard: every alarm of the four stacks, then one row per concern.

    Example::

        StageDashboard(self, "Dashboard", name="MangaAssist-dev", alarms=[...], storage=storage,
                       events=events, orchestration=orchestration, rest=rest, chat=chat)

    The dashboard is this construct's default child (id ``Default``, which CDK leaves out of
    logical ids): it kept its logical id when the builder became a construct, so a deploy updates
    the named dashboard instead of replacing it (a replacement would delete the new one's name).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name: str,
        alarms: Sequence[cloudwatch.IAlarm],
        storage: StorageStack,
        events: EventsStack,
        orchestration: OrchestrationStack,
        rest: MangaAssistRestApi,
        chat: ChatApi,
    ) -> None:
        super().__init__(scope, construct_id)
        self.board: OpsDashboard = OpsDashboard(self, "Default", dashboard_name=name, alarms=list(alarms))
        self.board.add_row("API traffic and errors", _traffic(rest, chat))
        self.board.add_row("Chat and handoffs", _chat_and_handoffs(orchestration))
        self.board.add_row("Handoff metrics and sessions in progress", events.handoff_metrics.graphs())
        self.board.add_row("Stream and dead-letter queues", _stream_and_queues(events, orchestration, Stack.of(self)))
        machines: dict[str, sfn.IStateMachine] = {
            "Handoff": orchestration.handoff_state_machine,
            "Cleanup": orchestration.cleanup_state_machine,
            "Export": orchestration.export_state_machine,
            "Onboarding": chat.onboarding_workflow.state_machine,
        }
        self.board.add_row(
            "Workflow outcomes",
            [
                ("Succeeded", [m.metric_succeeded(label=name) for name, m in machines.items()]),
                ("Failed / timed out", [m.metric_failed(label=name) for name, m in machines.items()]),
            ],
        )
        self.board.add_row("Cost drivers", _cost_graphs(storage))

    @property
    def dashboard(self) -> cloudwatch.Dashboard:
        return self.board.dashboard


def _traffic(rest: MangaAssistRestApi, chat: ChatApi) -> Graphs:
    api = rest.api
    return [
        ("REST requests", [api.metric_count()]),
        ("REST 4XX / 5XX", [api.metric_client_error(), api.metric_server_error()]),
        (
            "WebSocket messages / integration errors",
            [chat.metric(name) for name in ("MessageCount", "IntegrationError")],
        ),
    ]


def _chat_and_handoffs(orchestration: OrchestrationStack) -> Graphs:
    handoff = orchestration.handoff_state_machine
    return [
        ("Chat turns per minute", [service_metric(MESSAGE_FUNCTION, "ChatTurns").with_(period=Duration.minutes(1))]),
        ("Model gave no reply", [service_metric(MESSAGE_FUNCTION, "Message_no_reply")]),
        ("Model fallbacks / busy replies", [model_fallbacks(), service_metric(MESSAGE_FUNCTION, "Message_busy")]),
        (
            "Handoffs started / completed / failed",
            [handoff.metric_started(), handoff.metric_succeeded(), handoff.metric_failed()],
        ),
    ]


def _stream_and_queues(events: EventsStack, orchestration: OrchestrationStack, api: Stack) -> Graphs:
    return [
        (
            "Stream lag (router IteratorAge, ms)",
            [events.router_function.function.metric("IteratorAge", statistic="Maximum")],
        ),
        (
            "Dead-letter queue depths",
            [
                queue.metric_approximate_number_of_messages_visible(statistic="Maximum")
                for holder in (events, orchestration, api)
                for queue in dead_letter_queues(holder)
            ],
        ),
    ]


def _cost_graphs(storage: StorageStack) -> Graphs:
    """Lambda duration over all functions, and the table's consumed capacity."""
    table_name = storage.table.table_name
    return [
        (
            "Lambda duration, all functions (ms, sum)",
            [cloudwatch.Metric(namespace="AWS/Lambda", metric_name="Duration", statistic="Sum")],
        ),
        (
            "DynamoDB consumed capacity",
            [
                cloudwatch.Metric(
                    namespace="AWS/DynamoDB",
                    metric_name=name,
                    dimensions_map={"TableName": table_name},
                    statistic="Sum",
                )
                for name in ("ConsumedReadCapacityUnits", "ConsumedWriteCapacityUnits")
            ],
        ),
    ]
