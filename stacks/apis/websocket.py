"""The app's WebSocket chat API: $connect (authorizer + onboarding workflow), $disconnect, sendMessage, $default.

Tokens are verified against the stage's issuer exactly as the REST authorizer does (one
verifier, one ``ISSUER_*`` environment); the agent routes get the WebSocket endpoint and the
right to post to connections. Constructs keep the ids and the parent (the given stack) they
always had.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as lambda_events
from aws_cdk import aws_logs as logs

from constructs_lib import SecureWebSocketApi
from constructs_lib.workflow_defaults import WorkflowOptions
from contracts.chat import SEND_MESSAGE
from stacks.config import StageConfig
from stacks.events_stack import EventsStack
from stacks.functions import FunctionFactory, grant_invoke_model, log_retention
from stacks.identity import token_environment
from stacks.storage_stack import StorageStack
from stacks.workflows import APP_RETRY, OnboardingWorkflow

#: The message path's function id; SharedFunction's service name (and metrics namespace) derive from it.
MESSAGE_FUNCTION = "WsMessage"
MESSAGE_SERVICE = f"mangaassist-{MESSAGE_FUNCTION}"


@dataclass(frozen=True)
class WebSocketParts:
    """What the chat API builder made."""

    chat_api: SecureWebSocketApi
    onboarding_workflow: OnboardingWorkflow
    message_function: lambda_.Function
    customer_notifier: lambda_.Function
    #: ``$disconnect``: also fails the wait of a handoff whose customer leaves before anyone took it.
    disconnect_function: lambda_.Function

    @property
    def websocket_api(self) -> apigwv2.WebSocketApi:
        return self.chat_api.api

    @property
    def websocket_stage(self) -> apigwv2.WebSocketStage:
        return self.chat_api.stage


def build_websocket_api(
    stack: Stack,
    *,
    config: StageConfig,
    storage: StorageStack,
    events: EventsStack,
    agent_function: lambda_.Function,
    function: FunctionFactory,
) -> WebSocketParts:
    """The chat API in ``stack``, its route functions, the onboarding workflow and the customer notifier."""
    retention = log_retention(config.log_retention_days)
    session_env = {"TABLE_NAME": storage.table.table_name}

    authorizer = function("WsAuthorizer", "lambdas.ws.authorizer.handler", token_environment(config, storage.users))

    prepare = function("OnboardingPrepare", "lambdas.ws.onboarding.handler", session_env)
    deliver = function("OnboardingDeliver", "lambdas.ws.onboarding.deliver", {})
    storage.sessions.grant_read_write_data(prepare)
    onboarding = OnboardingWorkflow(
        stack,
        "Onboarding",
        prepare_function=prepare,
        deliver_function=deliver,
        options=WorkflowOptions(
            encryption_key=storage.key,
            log_retention=retention,
            include_execution_data=config.log_execution_data,
            retry=APP_RETRY,
        ),
    )

    connect = function(
        "WsConnect",
        "lambdas.ws.connect.handler",
        {**session_env, "ONBOARDING_STATE_MACHINE_ARN": onboarding.state_machine.state_machine_arn},
    )
    storage.sessions.grant_read_update_data(connect)  # reads the session to resume, holds connection slots
    onboarding.grant_start_execution(connect)

    disconnect = function("WsDisconnect", "lambdas.ws.disconnect.handler", session_env)
    storage.sessions.grant_read_write_data(disconnect)

    # Reserved concurrency both guarantees the chat its share and caps it: a burst of messages
    # (each a model call) cannot take the account's concurrency from every other function.
    message = function(
        MESSAGE_FUNCTION,
        "lambdas.ws.message.handler",
        session_env,
        reserved_concurrent_executions=config.message_reserved_concurrency,
    )
    storage.sessions.grant_read_write_data(message)
    if config.bedrock_model_id is not None:
        grant_invoke_model(message, config.bedrock_model_id, streaming=True, guardrail_id=config.bedrock_guardrail_id)

    default = function("WsDefault", "lambdas.ws.default.handler", {})

    chat_api = SecureWebSocketApi(
        stack,
        "ChatApi",
        stage_name=config.name,
        description=f"MangaAssist {config.name}: customer chat",
        authorizer_handler=authorizer,
        connect_handler=connect,
        disconnect_handler=disconnect,
        default_handler=default,
        routes={SEND_MESSAGE: message},
        throttle_rate_limit=config.api_throttle_rate,
        throttle_burst_limit=config.api_throttle_burst,
        route_throttles={
            "$connect": apigwv2.ThrottleSettings(
                rate_limit=config.ws_connect_throttle_rate, burst_limit=config.ws_connect_throttle_burst
            ),
            SEND_MESSAGE: apigwv2.ThrottleSettings(
                rate_limit=config.ws_message_throttle_rate, burst_limit=config.ws_message_throttle_burst
            ),
        },
        access_log_group_props=logs.LogGroupProps(
            retention=retention, encryption_key=storage.key, removal_policy=RemovalPolicy.DESTROY
        ),
    )
    for poster in (message, deliver):
        chat_api.grant_manage_connections(poster)

    notifier = _customer_notifier(chat_api, storage, events, session_env, function)
    agent_function.add_environment("WEBSOCKET_ENDPOINT", chat_api.management_endpoint)
    chat_api.grant_manage_connections(agent_function)
    return WebSocketParts(
        chat_api=chat_api,
        onboarding_workflow=onboarding,
        message_function=message,
        customer_notifier=notifier,
        disconnect_function=disconnect,
    )


def _customer_notifier(
    chat_api: SecureWebSocketApi,
    storage: StorageStack,
    events: EventsStack,
    session_env: dict[str, str],
    function: FunctionFactory,
) -> lambda_.Function:
    """The consumer of the events stack's customer notification queue: the chat, else e-mail, else the transcript."""
    notifier = function(
        "CustomerNotifier",
        "lambdas.events.customer_notifier.handler",
        {**session_env, **events.notice_mail.environment, "WEBSOCKET_ENDPOINT": chat_api.management_endpoint},
    )
    storage.sessions.grant_read_write_data(notifier)
    events.notice_mail.grant_send(notifier)
    chat_api.grant_manage_connections(notifier)
    notifier.add_event_source(
        lambda_events.SqsEventSource(events.customer_notification_queue, batch_size=10, report_batch_item_failures=True)
    )
    return notifier
