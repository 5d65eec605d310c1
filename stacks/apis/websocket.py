"""The app's WebSocket chat API: $connect (authorizer + onboarding workflow), $disconnect, the chat actions, $default.

Tokens are verified against the stage's issuer exactly as the REST authorizer does (one
verifier, one ``ISSUER_*`` environment); the agent routes get the WebSocket endpoint and the
right to post to connections (:meth:`ChatApi.grant_push`).
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as lambda_events
from aws_cdk import aws_logs as logs
from constructs import Construct

from constructs_lib import SecureWebSocketApi, ServiceAlarms
from constructs_lib.workflow_defaults import WorkflowOptions
from contracts.chat import CONTINUE, REWIND, SEND_MESSAGE
from stacks.config import StageConfig
from stacks.events_stack import EventsStack
from stacks.functions import StageFunctions, grant_stage_models, log_retention, service_metric
from stacks.guardrail import grant_guardrail, guardrail_environment
from stacks.identity import token_environment
from stacks.storage_stack import StorageStack
from stacks.workflows import APP_RETRY, OnboardingWorkflow

#: The message path's function id, which is also its Powertools service name (its metrics' ``service``).
MESSAGE_FUNCTION = "WsMessage"
#: The functions that call the model, by construct id: the chat, the REST rewind, the rolling summary.
MODEL_CALLERS = (MESSAGE_FUNCTION, "SessionApi", "SummaryGenerator")


def model_fallbacks() -> cloudwatch.MathExpression:
    """Fallbacks to the stage's fallback model across every function that calls the model (5-minute sums)."""
    metrics = {f"m{n}": service_metric(caller, "ModelFallbacks") for n, caller in enumerate(MODEL_CALLERS)}
    return cloudwatch.MathExpression(
        expression=" + ".join(metrics),
        using_metrics=metrics,
        label="Model fallbacks",
        period=Duration.minutes(5),
    )


class ChatApi(Construct):
    """The chat API, its route functions, the onboarding workflow and the customer notifier.

    Example::

        chat = ChatApi(self, "ChatApi", config=config, storage=storage, events=events, functions=functions)
        chat.grant_push(agent_function)           # the agent routes post to customers' connections

    The WebSocket API is this construct's default child (id ``Default``, which CDK leaves out of
    logical ids), so the API, its stage and routes kept their logical ids, and with them the
    chat's URL, when the builder became a construct; the functions and the onboarding workflow
    are children of this construct.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        storage: StorageStack,
        events: EventsStack,
        functions: StageFunctions,
    ) -> None:
        super().__init__(scope, construct_id)
        self._config = config
        self._log_key = storage.key
        session_env = {"TABLE_NAME": storage.table.table_name}
        authorizer = functions(
            self, "WsAuthorizer", "lambdas.ws.authorizer.handler", token_environment(config, storage.users)
        ).function
        self.onboarding_workflow: OnboardingWorkflow = self._onboarding(storage, functions)
        connect = functions(
            self,
            "WsConnect",
            "lambdas.ws.connect.handler",
            {**session_env, "ONBOARDING_STATE_MACHINE_ARN": self.onboarding_workflow.state_machine.state_machine_arn},
        ).function
        storage.sessions.grant_read_update_data(connect)  # reads the session to resume, holds connection slots
        self.onboarding_workflow.grant_start_execution(connect)
        #: ``$disconnect``: also fails the wait of a handoff whose customer leaves before anyone took it.
        self.disconnect_function: lambda_.Function = functions(
            self, "WsDisconnect", "lambdas.ws.disconnect.handler", session_env
        ).function
        storage.sessions.grant_read_write_data(self.disconnect_function)
        self.message_function: lambda_.Function = self._message_function(storage, functions, session_env)
        default = functions(self, "WsDefault", "lambdas.ws.default.handler").function
        self.chat_api: SecureWebSocketApi = self._api(authorizer, connect, default)
        for poster in (self.message_function, self._deliver):
            self.chat_api.grant_manage_connections(poster)
        self.customer_notifier: lambda_.Function = self._customer_notifier(storage, events, session_env, functions)

    @property
    def websocket_api(self) -> apigwv2.WebSocketApi:
        return self.chat_api.api

    @property
    def websocket_stage(self) -> apigwv2.WebSocketStage:
        return self.chat_api.stage

    def grant_push(self, function: lambda_.Function) -> iam.Grant:
        """Let ``function`` post frames to the chat's connections, and tell it where (``WEBSOCKET_ENDPOINT``)."""
        function.add_environment("WEBSOCKET_ENDPOINT", self.chat_api.management_endpoint)
        return self.chat_api.grant_manage_connections(function)

    def watch(self, alarms: ServiceAlarms) -> None:
        """The chat's own alarms on the stack's alarms: failed route integrations, and no reply from the model."""
        alarms.alarm(
            "WebSocketIntegrationErrors",
            metric=self.metric("IntegrationError").with_(period=Duration.minutes(5)),
            threshold=0,
            description="WebSocket routes whose Lambda integration failed (the client got an internal error).",
            runbook="Check the route functions' Errors alarms and logs (WsConnect, WsMessage, WsDisconnect).",
        )
        alarms.alarm(
            "ResponderBedrockFailures",
            metric=service_metric(MESSAGE_FUNCTION, "Message_no_reply"),
            threshold=0,
            description="The model gave no reply (Bedrock throttled, timed out or failed after retries); "
            "the customer got an error frame and their turn is stored.",
            runbook="Check Bedrock quotas/throttling for the model in this region and the WsMessage logs "
            "(reason field); summaries failing the same way land in the summary DLQ.",
        )

        alarms.alarm(
            "ModelFallbacks",
            metric=model_fallbacks(),
            threshold=self._config.model_resilience.fallback_alarm_threshold,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            description="Replies or summaries written by the fallback model in five minutes: the stage's model "
            "throttled, was not ready, timed out, failed or has reached its end of life.",
            runbook="Read the reason in the ModelFallback_<reason> metrics (WsMessage, SessionApi, "
            "SummaryGenerator): throttled - raise the Bedrock quota or lower model_calls_per_second; end_of_life - "
            "move bedrock_model_id to a current model (docs/operations.md, model fallback).",
        )

    def metric(self, name: str) -> cloudwatch.Metric:
        """An API Gateway metric of the chat API's stage (``Sum``)."""
        dimensions = {"ApiId": self.websocket_api.api_id, "Stage": self.websocket_stage.stage_name}
        return cloudwatch.Metric(
            namespace="AWS/ApiGateway", metric_name=name, dimensions_map=dimensions, statistic="Sum"
        )

    def _onboarding(self, storage: StorageStack, functions: StageFunctions) -> OnboardingWorkflow:
        """The Express workflow ``$connect`` starts: prepare the session, then greet the open connection."""
        config = self._config
        prepare = functions(
            self, "OnboardingPrepare", "lambdas.ws.onboarding.handler", {"TABLE_NAME": storage.table.table_name}
        ).function
        self._deliver = functions(self, "OnboardingDeliver", "lambdas.ws.onboarding.deliver").function
        storage.sessions.grant_read_write_data(prepare)
        return OnboardingWorkflow(
            self,
            "Onboarding",
            prepare_function=prepare,
            deliver_function=self._deliver,
            options=WorkflowOptions(
                encryption_key=storage.key,
                log_retention=log_retention(config.log_retention_days),
                include_execution_data=config.log_execution_data,
                retry=APP_RETRY,
            ),
        )

    def _message_function(
        self, storage: StorageStack, functions: StageFunctions, session_env: dict[str, str]
    ) -> lambda_.Function:
        """The message path: the customer's turn, the model's reply, streamed back to the connection."""
        config = self._config
        # Reserved concurrency both guarantees the chat its share and caps it: a burst of messages
        # (each a model call) cannot take the account's concurrency from every other function. It is
        # what the sendMessage throttle admits times the reply's p95 duration (stacks/capacity.py). Its
        # timeout is the longest reply's: the model's deadline and the time to store the reply.
        limits = config.capacity.limits
        message = functions(
            self,
            MESSAGE_FUNCTION,
            "lambdas.ws.message.handler",
            {**session_env, **guardrail_environment(storage.guardrail)},
            reserved_concurrent_executions=limits.message_reserved_concurrency,
            timeout=Duration.seconds(limits.message_timeout_seconds),
        ).function
        storage.sessions.grant_read_write_data(message)
        grant_stage_models(message, config, streaming=True, guardrail_id=config.bedrock_guardrail_id)
        grant_guardrail(message, storage.guardrail)
        return message

    def _api(
        self, authorizer: lambda_.IFunction, connect: lambda_.IFunction, default: lambda_.IFunction
    ) -> SecureWebSocketApi:
        config = self._config
        limits = config.capacity.limits  # every throttle derives from the stage's target (docs/capacity.md)
        message_throttle = apigwv2.ThrottleSettings(
            rate_limit=limits.ws_message_rate, burst_limit=limits.ws_message_burst
        )
        return SecureWebSocketApi(
            self,
            "Default",
            stage_name=config.name,
            description=f"MangaAssist {config.name}: customer chat",
            authorizer_handler=authorizer,
            connect_handler=connect,
            disconnect_handler=self.disconnect_function,
            default_handler=default,
            routes={
                SEND_MESSAGE: self.message_function,
                REWIND: self.message_function,
                CONTINUE: self.message_function,
            },
            throttle_rate_limit=limits.ws_default_rate,
            throttle_burst_limit=limits.ws_default_burst,
            route_throttles={
                "$connect": apigwv2.ThrottleSettings(
                    rate_limit=limits.ws_connect_rate, burst_limit=limits.ws_connect_burst
                ),
                SEND_MESSAGE: message_throttle,
                REWIND: message_throttle,
                CONTINUE: message_throttle,
            },
            access_log_group_props=logs.LogGroupProps(
                retention=log_retention(config.log_retention_days),
                encryption_key=self._log_key,
                removal_policy=RemovalPolicy.DESTROY,
            ),
        )

    def _customer_notifier(
        self, storage: StorageStack, events: EventsStack, session_env: dict[str, str], functions: StageFunctions
    ) -> lambda_.Function:
        """The customer notification queue's consumer: the chat, else e-mail, else the transcript."""
        notifier = functions(
            self,
            "CustomerNotifier",
            "lambdas.events.customer_notifier.handler",
            {
                **session_env,
                **events.notice_mail.environment,
                "WEBSOCKET_ENDPOINT": self.chat_api.management_endpoint,
            },
        ).function
        storage.sessions.grant_read_write_data(notifier)
        events.notice_mail.grant_send(notifier)
        self.chat_api.grant_manage_connections(notifier)
        notifier.add_event_source(
            lambda_events.SqsEventSource(
                events.customer_notification_queue, batch_size=10, report_batch_item_failures=True
            )
        )
        return notifier
