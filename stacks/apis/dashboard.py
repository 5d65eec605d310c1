"""The API stack's own alarms (APIs, responder) and the stage's one dashboard over all four stacks.

Built last, after both APIs: ``watch_stack`` alarms everything the stack holds by then.
"""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_stepfunctions as sfn

from constructs_lib import OpsDashboard, ServiceAlarms
from stacks.apis.websocket import MESSAGE_SERVICE, WebSocketParts
from stacks.config import StageConfig
from stacks.events_stack import EventsStack
from stacks.operations import dead_letter_queues, watch_stack
from stacks.orchestration_stack import OrchestrationStack
from stacks.storage_stack import StorageStack


def build_api_alarms(
    stack: Stack, *, config: StageConfig, storage: StorageStack, rest_api: apigw.RestApi, chat: WebSocketParts
) -> ServiceAlarms:
    """Alarms of ``stack`` (every function, queue and workflow it holds), the APIs' and the responder's."""
    alarms = watch_stack(stack, topic=storage.ops_topic, prefix=f"MangaAssist-{config.name}-Api")
    alarms.watch_rest_api(rest_api, "RestApi")
    alarms.alarm(
        "WebSocketIntegrationErrors",
        metric=_websocket_metric(chat, "IntegrationError").with_(period=Duration.minutes(5)),
        threshold=0,
        description="WebSocket routes whose Lambda integration failed (the client got an internal error).",
        runbook="Check the route functions' Errors alarms and logs (WsConnect, WsMessage, WsDisconnect).",
    )
    alarms.alarm(
        "ResponderBedrockFailures",
        metric=_service_metric(MESSAGE_SERVICE, "Message_no_reply"),
        threshold=0,
        description="The model gave no reply (Bedrock throttled, timed out or failed after retries); "
        "the customer got an error frame and their turn is stored.",
        runbook="Check Bedrock quotas/throttling for the model in this region and the WsMessage logs "
        "(reason field); summaries failing the same way land in the summary DLQ.",
    )
    return alarms


def build_dashboard(
    stack: Stack,
    *,
    config: StageConfig,
    storage: StorageStack,
    events: EventsStack,
    orchestration: OrchestrationStack,
    alarms: ServiceAlarms,
    rest_api: apigw.RestApi,
    chat: WebSocketParts,
) -> OpsDashboard:
    """One dashboard for the stage: every alarm, traffic, chat and handoffs, stream and DLQs, workflows, cost."""
    board = OpsDashboard(
        stack,
        "Dashboard",
        dashboard_name=f"MangaAssist-{config.name}",
        alarms=[*storage.alarms.alarms, *events.alarms.alarms, *orchestration.alarms.alarms, *alarms.alarms],
    )
    board.add_row(
        "API traffic and errors",
        [
            ("REST requests", [rest_api.metric_count()]),
            ("REST 4XX / 5XX", [rest_api.metric_client_error(), rest_api.metric_server_error()]),
            (
                "WebSocket messages / integration errors",
                [_websocket_metric(chat, name) for name in ("MessageCount", "IntegrationError")],
            ),
        ],
    )
    handoff = orchestration.handoff_state_machine
    board.add_row(
        "Chat and handoffs",
        [
            (
                "Chat turns per minute",
                [_service_metric(MESSAGE_SERVICE, "ChatTurns").with_(period=Duration.minutes(1))],
            ),
            ("Model gave no reply", [_service_metric(MESSAGE_SERVICE, "Message_no_reply")]),
            (
                "Handoffs started / completed / failed",
                [handoff.metric_started(), handoff.metric_succeeded(), handoff.metric_failed()],
            ),
        ],
    )
    board.add_row(
        "Stream and dead-letter queues",
        [
            (
                "Stream lag (router IteratorAge, ms)",
                [events.router_function.function.metric("IteratorAge", statistic="Maximum")],
            ),
            (
                "Dead-letter queue depths",
                [
                    queue.metric_approximate_number_of_messages_visible(statistic="Maximum")
                    for holder in (events, orchestration, stack)
                    for queue in dead_letter_queues(holder)
                ],
            ),
        ],
    )
    machines: dict[str, sfn.IStateMachine] = {
        "Handoff": handoff,
        "Cleanup": orchestration.cleanup_state_machine,
        "Export": orchestration.export_state_machine,
        "Onboarding": chat.onboarding_workflow.state_machine,
    }
    board.add_row(
        "Workflow outcomes",
        [
            ("Succeeded", [m.metric_succeeded(label=name) for name, m in machines.items()]),
            ("Failed / timed out", [m.metric_failed(label=name) for name, m in machines.items()]),
        ],
    )
    board.add_row("Cost drivers", _cost_graphs(storage))
    return board


def _cost_graphs(storage: StorageStack) -> list[tuple[str, list[cloudwatch.IMetric]]]:
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


def _websocket_metric(chat: WebSocketParts, name: str) -> cloudwatch.Metric:
    """An API Gateway metric of the chat API's stage (``Sum``)."""
    dimensions = {"ApiId": chat.websocket_api.api_id, "Stage": chat.websocket_stage.stage_name}
    return cloudwatch.Metric(namespace="AWS/ApiGateway", metric_name=name, dimensions_map=dimensions, statistic="Sum")


def _service_metric(service: str, name: str) -> cloudwatch.Metric:
    """A Powertools (EMF) metric: the namespace and the ``service`` dimension are the function's service name."""
    return cloudwatch.Metric(namespace=service, metric_name=name, dimensions_map={"service": service}, statistic="Sum")
