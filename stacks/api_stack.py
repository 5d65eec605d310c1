"""ApiStack: the REST API and the WebSocket API."""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, ArnFormat, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as lambda_events
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_ssm as ssm
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from constructs_lib import OpsDashboard, SecureWebSocketApi, ServiceAlarms
from constructs_lib.encryption_key import EncryptionKey
from constructs_lib.nag_findings import acknowledge_policy, resource_finding
from constructs_lib.rest_api import HardenedRestApi
from constructs_lib.sfn_start_integration import InputField, StepFunctionsStartExecution
from constructs_lib.token_authorizer import JwtTokenAuthorizer
from constructs_lib.web_acl import RegionalWebAcl
from constructs_lib.workflow_defaults import WorkflowOptions
from lambdas.api import access
from lambdas.api.validation import BODY_MODELS, gateway_schema
from lambdas.ws.frames import SEND_MESSAGE
from stacks.config import StageConfig
from stacks.events_stack import EventsStack
from stacks.functions import grant_invoke_model, log_retention, stage_function
from stacks.operations import dead_letter_queues, watch_stack
from stacks.orchestration_stack import OrchestrationStack, rest_api_url_parameter
from stacks.storage_stack import StorageStack
from stacks.workflows import APP_RETRY, OnboardingWorkflow

# REST API (issue 4) helpers


#: The message path's function id; SharedFunction's service name (and metrics namespace) derive from it.
MESSAGE_FUNCTION = "WsMessage"
MESSAGE_SERVICE = f"mangaassist-{MESSAGE_FUNCTION}"


def _executions_arn(scope: Construct, machine: sfn.StateMachine) -> str:
    """``arn:...:execution:<state machine name>:*``, from the machine's name.

    CDK's ``grant_execution`` derives the name from the ARN with ``Fn::Select``/``Fn::Split``;
    across stacks that ARN is a ``Fn::GetStackOutput``, which cfn-lint does not accept inside
    ``Fn::Split`` (E1022). The name needs no splitting.
    """
    return Stack.of(scope).format_arn(
        service="states",
        resource="execution",
        resource_name=f"{machine.state_machine_name}:*",
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )


def _execution_finding(scope: Construct, machine: sfn.StateMachine) -> str:
    """The IAM5 finding of ``_executions_arn`` on a state machine of another stack, as cdk-nag prints it."""
    name = resource_finding(scope, machine.state_machine_name, owner=machine).removeprefix("Resource::")
    return f"Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:{name}:*"


def _operation_name(method: str, path: str) -> str:
    """``GET /sessions/{id}/turns`` -> ``GetSessionsIdTurns`` (unique per method and path)."""
    words = [part.strip("{}") for part in path.split("/") if part]
    return method.capitalize() + "".join(word[:1].upper() + word[1:].replace("_", "") for word in words)


class ApiStack(Stack):
    """The client-facing APIs. Receives everything it fronts."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        storage: StorageStack,
        events: EventsStack,
        orchestration: OrchestrationStack,
        **kwargs: object,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        self.config = config
        # REST API (issue 4): first, it creates the JWT secret both APIs verify with.
        self._build_rest_api(config=config, storage=storage, orchestration=orchestration)
        # WebSocket chat API (issue 5): it wires what the REST part exposes.
        self._build_websocket_api(config=config, storage=storage, events=events)
        # Operations (issue 10): alarms for this stack, and the stage's dashboard over all four.
        self._build_operations(config=config, storage=storage, events=events, orchestration=orchestration)

    def _function(
        self, construct_id: str, handler: str, environment: dict[str, str], **options: Any
    ) -> lambda_.Function:
        """A function of this stack, built the app's one way; its service name is ``mangaassist-<id>``."""
        return stage_function(
            self,
            construct_id,
            self.config,
            handler=handler,
            environment=environment,
            service_name=f"mangaassist-{construct_id}",
            **options,
        ).function

    # ------------------------------------------------------------------ REST API (issue 4)
    # Owned by the REST engineer: everything from here to "end of REST API".

    def _build_rest_api(self, *, config: StageConfig, storage: StorageStack, orchestration: OrchestrationStack) -> None:
        """The REST API: session Lambda routes, direct StartExecution routes, agent and review routes.

        Exposes ``rest_api`` (``apigateway.RestApi``), ``rest`` (the construct), ``jwt_secret``,
        ``session_function``, ``rest_authorizer_function``, ``agent_function`` and ``review_function``.
        """
        retention = log_retention(config.log_retention_days)
        removal = config.resource_removal_policy

        function = self._function

        self.rest = HardenedRestApi(
            self,
            "RestApi",
            description=f"MangaAssist {config.name}: sessions, handoffs, admin workflows",
            stage_name=config.name,
            cors_allowed_origins=config.cors_allowed_origins,
            throttle_rate=config.api_throttle_rate,
            throttle_burst=config.api_throttle_burst,
            log_retention=retention,
            log_encryption_key=storage.key,
            log_execution_data=config.log_execution_data,
            log_removal_policy=removal,
            cloud_watch_role=True,
        )
        self.rest_api: apigw.RestApi = self.rest.api
        api = self.rest.api

        # -- authorizer and the signing secret shared with the WebSocket API -------------------
        self.rest_authorizer_function = function(
            "RestAuthorizer",
            "lambdas.api.authorizer.handler",
            {},
        )
        # A key of this stack: granting the authorizers decrypt on the storage key from here would
        # put their roles into that key's policy and make Storage depend on Api.
        secret_key = EncryptionKey(
            self,
            "SecretsKey",
            description=f"MangaAssist {config.name}: API token signing secret",
            removal_policy=removal,
            pending_window=config.key_pending_window,
        )
        token_authorizer = JwtTokenAuthorizer(
            self,
            "JwtAuthorizer",
            function=self.rest_authorizer_function,
            secret_encryption_key=secret_key.key,
            secret_removal_policy=removal,
            cache_ttl=Duration.seconds(config.authorizer_cache_seconds),
        )
        self.jwt_secret: secretsmanager.ISecret = token_authorizer.secret
        authorizer = token_authorizer.authorizer

        # -- session Lambda --------------------------------------------------------------------
        workflows = (
            orchestration.handoff_state_machine,
            orchestration.cleanup_state_machine,
            orchestration.export_state_machine,
        )
        self.session_function = function(
            "SessionApi",
            "lambdas.api.rest.handler",
            {
                "TABLE_NAME": storage.table.table_name,
                "STATE_MACHINE_ARNS": ",".join(machine.state_machine_arn for machine in workflows),
            },
        )
        storage.sessions.grant_read_write_data(self.session_function)
        findings = {}
        for machine in workflows:
            iam.Grant.add_to_principal(
                grantee=self.session_function,
                actions=["states:DescribeExecution"],
                resource_arns=[_executions_arn(self, machine)],
            )
            findings[_execution_finding(self, machine)] = (
                "DescribeExecution on the executions of one workflow (execution names are per request); "
                "GET /executions/{id} answers only for these workflows and only to the execution's starter."
            )
        acknowledge_policy(self.session_function.role, findings)  # type: ignore[arg-type]
        session_api = apigw.LambdaIntegration(self.session_function, allow_test_invoke=False)

        models = {name: self.rest.add_model(name, gateway_schema(body)) for name, body in BODY_MODELS.items()}

        def json_body(model: str) -> dict[str, apigw.IModel]:
            return {"application/json": models[model]}

        def params(*path: str, query: tuple[str, ...] = (), headers: tuple[str, ...] = ()) -> dict[str, bool]:
            result = {f"method.request.path.{name}": True for name in path}
            result.update({f"method.request.querystring.{name}": False for name in query})
            result.update({f"method.request.header.{name}": False for name in headers})
            return result

        def add(
            resource: apigw.IResource,
            method: str,
            integration: apigw.Integration,
            *,
            models_: dict[str, apigw.IModel] | None = None,
            parameters: dict[str, bool] | None = None,
            method_responses: list[apigw.MethodResponse] | None = None,
            public: bool = False,
        ) -> apigw.Method:
            path = resource.path
            route = access.route(method, path)  # every method must be in the access table
            if route.public != public:
                raise ValueError(f"{method} {path}: public={public} contradicts lambdas.api.access.ROUTES")
            return resource.add_method(
                method,
                integration,
                operation_name=_operation_name(method, path),
                authorizer=None if public else authorizer,
                authorization_type=apigw.AuthorizationType.NONE if public else apigw.AuthorizationType.CUSTOM,
                request_validator=self.rest.body_validator if models_ else self.rest.params_validator,
                request_models=models_,
                request_parameters=parameters,
                method_responses=method_responses,
            )

        sessions = api.root.add_resource("sessions")
        add(sessions, "POST", session_api, models_=json_body("CreateSessionRequest"))
        session = sessions.add_resource("{id}")
        add(session, "GET", session_api, parameters=params("id"))
        add(session, "DELETE", session_api, parameters=params("id"))
        add(session.add_resource("turns"), "GET", session_api, parameters=params("id", query=("limit", "cursor")))
        customer_sessions = api.root.add_resource("customers").add_resource("{id}").add_resource("sessions")
        add(customer_sessions, "GET", session_api, parameters=params("id", query=("limit", "cursor")))
        add(api.root.add_resource("executions").add_resource("{id}"), "GET", session_api, parameters=params("id"))

        # -- direct StartExecution routes (no Lambda) ------------------------------------------
        caller = {"requested_by": InputField.authorizer("sub"), "role": InputField.authorizer("role")}
        cors = self.rest.cors_headers()
        starts = {
            "StartHandoff": (
                orchestration.handoff_state_machine,
                {
                    "session_id": InputField.path("id"),
                    "reason": InputField.body("reason"),
                    "priority": InputField.body("priority", default_json='"normal"'),
                    **caller,
                },
            ),
            "StartCleanup": (
                orchestration.cleanup_state_machine,
                {
                    "older_than_seconds": InputField.body(
                        "older_than_seconds", default_json=str(config.cleanup_grace_seconds)
                    ),
                    **caller,
                },
            ),
            "StartExport": (orchestration.export_state_machine, {"reason": InputField.body("reason"), **caller}),
        }
        self.start_integrations: dict[str, StepFunctionsStartExecution] = {
            construct_id: StepFunctionsStartExecution(
                self, construct_id, state_machine=machine, input_fields=fields, cors_headers=cors
            )
            for construct_id, (machine, fields) in starts.items()
        }

        def start(resource: apigw.IResource, construct_id: str, model: str, *path: str) -> None:
            integration = self.start_integrations[construct_id]
            add(
                resource,
                "POST",
                integration.integration,
                models_=json_body(model),
                parameters=params(*path, headers=("Idempotency-Key",)),
                method_responses=integration.method_responses,
            )

        start(session.add_resource("handoff"), "StartHandoff", "HandoffRequest", "id")
        admin = api.root.add_resource("admin")
        start(admin.add_resource("cleanup"), "StartCleanup", "CleanupRequest")
        start(admin.add_resource("export"), "StartExport", "ExportRequest")

        # -- agent console routes (code: orchestration engineer) -------------------------------
        self.agent_function: lambda_.Function = function(
            "AgentApi",
            "lambdas.api.agent.handler",
            {"TABLE_NAME": storage.table.table_name},
        )
        storage.sessions.grant_read_write_data(self.agent_function)
        orchestration.grant_agent_routes(self.agent_function)
        agent_api = apigw.LambdaIntegration(self.agent_function, allow_test_invoke=False)
        handoff = api.root.add_resource("handoffs").add_resource("{session_id}")
        add(handoff.add_resource("accept"), "POST", agent_api, parameters=params("session_id"))
        add(handoff.add_resource("messages"), "POST", agent_api, parameters=params("session_id"))
        # -- review links (code: approval-gate engineer); the signed link is the credential ---
        self.review_function: lambda_.Function = function(
            "ReviewLinks",
            "lambdas.api.review.handler",
            {
                "TABLE_NAME": storage.table.table_name,
                "REVIEW_SECRET_ARN": orchestration.review_signing_secret.secret_arn,
            },
        )
        # HumanApprovalGate.grant_decide would grant the secret read through the key's resource
        # policy (a ViaService grant), naming this stack's role in the Orchestration stack: a
        # cycle. The same permissions, on this side only:
        storage.sessions.grant_read_write_data(self.review_function)
        # Principal-side only (no cycle), including kms:Decrypt on the secret's own key.
        orchestration.approval_gate.grant_read_signing_secret(self.review_function)
        orchestration.export_state_machine.grant_task_response(self.review_function)
        review_api = apigw.LambdaIntegration(self.review_function, allow_test_invoke=False)
        review = api.root.add_resource("reviews").add_resource("{id}")
        for decision in ("approve", "reject"):
            method = add(review.add_resource(decision), "GET", review_api, parameters=params("id"), public=True)
            Validations.of(method).acknowledge(
                Acknowledgment(
                    id="AwsSolutions-APIG4",
                    reason="Review links are opened from an e-mail by a reviewer without an API token; "
                    "the HMAC-SHA256 signature and expiry inside the link are the credential (checked "
                    "before any data is read).",
                )
            )
        ssm.StringParameter(
            self,
            "RestApiUrl",
            parameter_name=rest_api_url_parameter(config.name),
            string_value=api.url,
            description="Base URL of the REST API (the approval gate builds review links from it)",
        )

        # -- gateway-wide checks ---------------------------------------------------------------
        for method in api.methods:
            if method.http_method == "OPTIONS":
                Validations.of(method).acknowledge(
                    Acknowledgment(
                        id="AwsSolutions-APIG4",
                        reason="CORS preflight (a MOCK integration answering only CORS headers): browsers "
                        "send it without credentials by design.",
                    )
                )
        Validations.of(api).acknowledge(
            Acknowledgment(
                id="AwsSolutions-COG4",
                reason="Callers authenticate with HS256 bearer tokens verified by the Lambda TOKEN "
                "authorizer (least-privilege policy per role); the product has no Cognito user pool.",
            )
        )
        if config.waf_enabled:
            self.web_acl = RegionalWebAcl(self, "WebAcl", rate_limit=max(100, int(config.api_throttle_rate * 60)))
            self.web_acl.associate("RestApiStage", self.rest.stage.stage_arn)
        else:
            Validations.of(self.rest.stage).acknowledge(
                Acknowledgment(
                    id="AwsSolutions-APIG3",
                    reason=f"Stage {config.name} runs without WAF by configuration (waf_enabled=false): a "
                    "development stage behind throttling and the authorizer; production enables it.",
                )
            )

    # ------------------------------------------------------------------ end of REST API (issue 4)

    # ------------------------------------------------------------------ WebSocket chat API (issue 5)
    # Owned by the WebSocket engineer: everything from here to "end of WebSocket chat API".

    def _build_websocket_api(self, *, config: StageConfig, storage: StorageStack, events: EventsStack) -> None:
        """The chat API: $connect (authorizer + Onboarding workflow), $disconnect, sendMessage, $default.

        Exposes ``websocket_api``, ``websocket_stage``, ``chat_api`` (the construct) and
        ``onboarding_workflow`` and ``customer_notifier``. Verifies tokens with the REST part's
        ``jwt_secret`` (one secret, one JWT implementation) and gives its agent route, when it
        exists, the WebSocket endpoint and the right to post to connections.
        """

        retention = log_retention(config.log_retention_days)
        session_env = {"TABLE_NAME": storage.table.table_name}

        function = self._function

        authorizer = function(
            "WsAuthorizer",
            "lambdas.ws.authorizer.handler",
            {"JWT_SECRET_ARN": self.jwt_secret.secret_arn},
        )
        self.jwt_secret.grant_read(authorizer)

        prepare = function("OnboardingPrepare", "lambdas.ws.onboarding.handler", session_env)
        deliver = function("OnboardingDeliver", "lambdas.ws.onboarding.deliver", {})
        storage.sessions.grant_read_write_data(prepare)
        self.onboarding_workflow = OnboardingWorkflow(
            self,
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
            {**session_env, "ONBOARDING_STATE_MACHINE_ARN": self.onboarding_workflow.state_machine.state_machine_arn},
        )
        storage.sessions.grant_read_data(connect)
        self.onboarding_workflow.grant_start_execution(connect)

        disconnect = function("WsDisconnect", "lambdas.ws.disconnect.handler", session_env)
        storage.sessions.grant_read_write_data(disconnect)

        message = function(MESSAGE_FUNCTION, "lambdas.ws.message.handler", session_env)
        self.message_function: lambda_.Function = message
        storage.sessions.grant_read_write_data(message)
        if config.bedrock_model_id is not None:
            grant_invoke_model(message, config.bedrock_model_id)

        default = function("WsDefault", "lambdas.ws.default.handler", {})

        self.chat_api = SecureWebSocketApi(
            self,
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
            access_log_group_props=logs.LogGroupProps(
                retention=retention, encryption_key=storage.key, removal_policy=RemovalPolicy.DESTROY
            ),
        )
        self.websocket_api: apigwv2.WebSocketApi = self.chat_api.api
        self.websocket_stage: apigwv2.WebSocketStage = self.chat_api.stage
        for poster in (message, deliver):
            self.chat_api.grant_manage_connections(poster)

        notifier = function(
            "CustomerNotifier",
            "lambdas.events.customer_notifier.handler",
            {**session_env, "WEBSOCKET_ENDPOINT": self.chat_api.management_endpoint},
        )
        storage.sessions.grant_read_write_data(notifier)
        self.chat_api.grant_manage_connections(notifier)
        notifier.add_event_source(
            lambda_events.SqsEventSource(
                events.customer_notification_queue, batch_size=10, report_batch_item_failures=True
            )
        )
        self.customer_notifier: lambda_.IFunction = notifier

        self.agent_function.add_environment("WEBSOCKET_ENDPOINT", self.chat_api.management_endpoint)
        self.chat_api.grant_manage_connections(self.agent_function)

    # ------------------------------------------------------------------ Operations (issue 10)

    def _build_operations(
        self, *, config: StageConfig, storage: StorageStack, events: EventsStack, orchestration: OrchestrationStack
    ) -> None:
        """Alarms of this stack (plus the APIs' and the responder's) and one dashboard for the stage."""
        self.alarms: ServiceAlarms = watch_stack(self, topic=storage.ops_topic, prefix=f"MangaAssist-{config.name}-Api")
        self.alarms.watch_rest_api(self.rest_api, "RestApi")
        ws_dimensions = {"ApiId": self.websocket_api.api_id, "Stage": self.websocket_stage.stage_name}
        self.alarms.alarm(
            "WebSocketIntegrationErrors",
            metric=cloudwatch.Metric(
                namespace="AWS/ApiGateway",
                metric_name="IntegrationError",
                dimensions_map=ws_dimensions,
                statistic="Sum",
                period=Duration.minutes(5),
            ),
            threshold=0,
            description="WebSocket routes whose Lambda integration failed (the client got an internal error).",
            runbook="Check the route functions' Errors alarms and logs (WsConnect, WsMessage, WsDisconnect).",
        )
        chat_metric = _service_metric(MESSAGE_SERVICE, "ChatTurns")
        no_reply = _service_metric(MESSAGE_SERVICE, "Message_no_reply")
        self.alarms.alarm(
            "ResponderBedrockFailures",
            metric=no_reply,
            threshold=0,
            description="The model gave no reply (Bedrock throttled, timed out or failed after retries); "
            "the customer got an error frame and their turn is stored.",
            runbook="Check Bedrock quotas/throttling for the model in this region and the WsMessage logs "
            "(reason field); summaries failing the same way land in the summary DLQ.",
        )

        board = OpsDashboard(
            self,
            "Dashboard",
            dashboard_name=f"MangaAssist-{config.name}",
            alarms=[*storage.alarms.alarms, *events.alarms.alarms, *orchestration.alarms.alarms, *self.alarms.alarms],
        )
        api = self.rest_api
        board.add_row(
            "API traffic and errors",
            [
                ("REST requests", [api.metric_count()]),
                ("REST 4XX / 5XX", [api.metric_client_error(), api.metric_server_error()]),
                (
                    "WebSocket messages / integration errors",
                    [
                        cloudwatch.Metric(
                            namespace="AWS/ApiGateway", metric_name=name, dimensions_map=ws_dimensions, statistic="Sum"
                        )
                        for name in ("MessageCount", "IntegrationError")
                    ],
                ),
            ],
        )
        handoff = orchestration.handoff_state_machine
        board.add_row(
            "Chat and handoffs",
            [
                ("Chat turns per minute", [chat_metric.with_(period=Duration.minutes(1))]),
                ("Model gave no reply", [no_reply]),
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
                        for stack in (events, orchestration, self)
                        for queue in dead_letter_queues(stack)
                    ],
                ),
            ],
        )
        machines = {
            "Handoff": handoff,
            "Cleanup": orchestration.cleanup_state_machine,
            "Export": orchestration.export_state_machine,
            "Onboarding": self.onboarding_workflow.state_machine,
        }
        board.add_row(
            "Workflow outcomes",
            [
                ("Succeeded", [m.metric_succeeded(label=name) for name, m in machines.items()]),
                ("Failed / timed out", [m.metric_failed(label=name) for name, m in machines.items()]),
            ],
        )
        table_name = storage.table.table_name
        board.add_row(
            "Cost drivers",
            [
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
            ],
        )
        self.dashboard: OpsDashboard = board


def _service_metric(service: str, name: str) -> cloudwatch.Metric:
    """A Powertools (EMF) metric: the namespace and the ``service`` dimension are the function's service name."""
    return cloudwatch.Metric(namespace=service, metric_name=name, dimensions_map={"service": service}, statistic="Sum")


# ------------------------------------------------------------------ end of WebSocket chat API (issue 5)
