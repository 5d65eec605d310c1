"""The app's REST API: session routes, direct StartExecution routes, agent routes, review links.

The order of the routes is kept as it always was, because the deployment's logical id hashes the
methods in the order they were added.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, ArnFormat, Duration, Stack, Validations
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from constructs_lib import ServiceAlarms
from constructs_lib.nag_findings import acknowledge_policy, resource_finding
from constructs_lib.rest_api import HardenedRestApi
from constructs_lib.sfn_start_integration import InputField, StepFunctionsStartExecution
from constructs_lib.token_authorizer import JwtTokenAuthorizer
from constructs_lib.web_acl import RegionalWebAcl
from constructs_lib.workflow_defaults import grant_history_key
from contracts import access
from contracts.logs import TOKEN_REFUSED
from contracts.requests import BODY_MODELS, gateway_schema
from stacks.config import WAF_WINDOW_SECONDS, StageConfig
from stacks.functions import METRICS_NAMESPACE, StageFunctions, grant_stage_models, log_retention
from stacks.guardrail import grant_guardrail, guardrail_environment
from stacks.identity import token_environment
from stacks.orchestration_stack import OrchestrationStack
from stacks.storage_stack import StorageStack


class _Routes:
    """Adds methods the one way: every route in the access table, the authorizer unless public."""

    def __init__(self, rest: HardenedRestApi, authorizer: apigw.IAuthorizer) -> None:
        self.rest = rest
        self.root = rest.api.root
        self._authorizer = authorizer
        self._models = {name: rest.add_model(name, gateway_schema(body)) for name, body in BODY_MODELS.items()}

    def json_body(self, model: str) -> dict[str, apigw.IModel]:
        return {"application/json": self._models[model]}

    @staticmethod
    def params(
        *path: str, query: tuple[str, ...] = (), required_query: tuple[str, ...] = (), headers: tuple[str, ...] = ()
    ) -> dict[str, bool]:
        """Declared request parameters; the params validator refuses a request without a required one."""
        result = {f"method.request.path.{name}": True for name in path}
        result.update({f"method.request.querystring.{name}": False for name in query})
        result.update({f"method.request.querystring.{name}": True for name in required_query})
        result.update({f"method.request.header.{name}": False for name in headers})
        return result

    def add(
        self,
        resource: apigw.IResource,
        method: str,
        integration: apigw.Integration,
        *,
        models: dict[str, apigw.IModel] | None = None,
        parameters: dict[str, bool] | None = None,
        method_responses: list[apigw.MethodResponse] | None = None,
        public: bool = False,
    ) -> apigw.Method:
        path = resource.path
        route = access.route(method, path)  # every method must be in the access table
        if route.public != public:
            raise ValueError(f"{method} {path}: public={public} contradicts contracts.access.ROUTES")
        return resource.add_method(
            method,
            integration,
            operation_name=_operation_name(method, path),
            authorizer=None if public else self._authorizer,
            authorization_type=apigw.AuthorizationType.NONE if public else apigw.AuthorizationType.CUSTOM,
            request_validator=self.rest.body_validator if models else self.rest.params_validator,
            request_models=models,
            request_parameters=parameters,
            method_responses=method_responses,
        )


class MangaAssistRestApi(Construct):
    """The REST API behind the authorizer that verifies the stage's identity tokens, with its functions.

    Example::

        rest = MangaAssistRestApi(self, "RestApi", config=config, storage=storage,
                                  orchestration=orchestration, functions=functions)
        rest.api.url

    Every method is one of the access table's routes (``contracts.access``). The hardened API is
    this construct's default child (id ``Default``, which CDK leaves out of logical ids), so the
    API, its stage and its methods kept their logical ids, and with them the API's URL, when the
    builder became a construct; the functions, the authorizer and the start integrations are
    children of this construct.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        storage: StorageStack,
        orchestration: OrchestrationStack,
        functions: StageFunctions,
    ) -> None:
        super().__init__(scope, construct_id)
        self.rest: HardenedRestApi = HardenedRestApi(
            self,
            "Default",
            description=f"MangaAssist {config.name}: sessions, handoffs, admin workflows",
            stage_name=config.name,
            cors_allowed_origins=config.cors_allowed_origins,
            throttle_rate=config.capacity.limits.rest_rate,
            throttle_burst=config.capacity.limits.rest_burst,
            log_retention=log_retention(config.log_retention_days),
            log_encryption_key=storage.key,
            log_execution_data=config.log_execution_data,
            log_removal_policy=config.resource_removal_policy,
            cloud_watch_role=True,
        )
        self.api: apigw.RestApi = self.rest.api
        authorizer = functions(
            self, "RestAuthorizer", "lambdas.api.authorizer.handler", token_environment(config, storage.users)
        )
        self.authorizer_function: lambda_.Function = authorizer.function
        # A refused token fails the authorizer on purpose ("Unauthorized" is how API Gateway is told
        # to answer 401), and Lambda counts each as an error. Its log line counts them, so the stage's
        # errors alarm on the authorizer watches only the failures beyond them.
        refusals = logs.MetricFilter(
            self,
            "TokensRefused",
            log_group=authorizer.log_group,
            metric_namespace=METRICS_NAMESPACE,
            metric_name="RestTokensRefused",
            filter_pattern=logs.FilterPattern.string_value("$.message", "=", TOKEN_REFUSED),
            metric_value="1",
        )
        #: By function construct path: the invocations that fail on purpose (see ``watch_stack``).
        self.deliberate_errors: dict[str, cloudwatch.IMetric] = {authorizer.node.path: refusals.metric(statistic="Sum")}
        token_authorizer = JwtTokenAuthorizer(
            self,
            "JwtAuthorizer",
            function=self.authorizer_function,
            cache_ttl=Duration.seconds(config.authorizer_cache_seconds),
        )
        self.session_function: lambda_.Function = _session_function(self, storage, orchestration, functions)
        routes = _Routes(self.rest, token_authorizer.authorizer)
        _session_routes(routes, self.session_function)
        self.start_integrations: dict[str, StepFunctionsStartExecution] = _start_routes(
            self, routes, config, orchestration
        )
        self.agent_function: lambda_.Function = _agent_routes(self, routes, storage, orchestration, functions)
        _review_routes(routes, orchestration)
        self.registry_function: lambda_.Function = _registry_routes(self, routes, storage, functions)
        _status_routes(routes, self.session_function)
        self.customer_data_function: lambda_.Function = _customer_data_routes(
            self, routes, storage, orchestration, functions
        )
        self.web_acl: RegionalWebAcl | None = _gateway_checks(self, config, self.rest, storage)

    @property
    def url(self) -> str:
        """The stage's invoke URL (ending in ``/``)."""
        return self.api.url

    def watch(self, alarms: ServiceAlarms) -> None:
        """The API's own alarms (5XX rate, latency) on the stack's alarms."""
        alarms.watch_rest_api(self.api, "RestApi")


def _session_function(
    scope: Construct, storage: StorageStack, orchestration: OrchestrationStack, functions: StageFunctions
) -> lambda_.Function:
    """The session Lambda: the table, the model (a rewound turn), DescribeExecution, StartExecution of a
    handoff (``POST /sessions/{id}/handoff`` checks the id first) and a waiting handoff's end (DELETE)."""
    workflows = (
        orchestration.handoff_state_machine,
        orchestration.cleanup_state_machine,
        orchestration.export_state_machine,
    )
    session_function = functions(
        scope,
        "SessionApi",
        "lambdas.api.rest.handler",
        {
            "TABLE_NAME": storage.table.table_name,
            "STATE_MACHINE_ARNS": ",".join(machine.state_machine_arn for machine in workflows),
            "HANDOFF_STATE_MACHINE_ARN": orchestration.handoff_state_machine.state_machine_arn,
            **guardrail_environment(storage.guardrail),
        },
    ).function
    storage.sessions.grant_read_write_data(session_function)
    # StartExecution on the one state machine (its ARN, no wildcard): the route's only start.
    orchestration.handoff.grant_start_execution(session_function)
    # DELETE of a session whose handoff still waits for an agent fails that wait (SendTaskFailure).
    orchestration.handoff.grant_task_failure(session_function)
    config = functions.config
    # POST /sessions/{id}/rewind answers the rewound turn (its model, or the fallback model)
    grant_stage_models(session_function, config, streaming=True, guardrail_id=config.bedrock_guardrail_id)
    if config.bedrock_model_id is not None:
        grant_guardrail(session_function, storage.guardrail)
    findings = {}
    for machine in workflows:
        iam.Grant.add_to_principal(
            grantee=session_function,
            actions=["states:DescribeExecution"],
            resource_arns=[_executions_arn(scope, machine)],
        )
        grant_history_key(session_function, machine, ["states:DescribeExecution"])
        findings[_execution_finding(scope, machine)] = (
            "DescribeExecution on the executions of one workflow (execution names are per request); "
            "GET /executions/{id} answers only for these workflows and only to the execution's starter."
        )
    acknowledge_policy(session_function.role, findings)  # type: ignore[arg-type]
    return session_function


def _session_routes(routes: _Routes, session_function: lambda_.Function) -> None:
    """Sessions, their turns and handoff request, a customer's sessions, executions."""
    session_api = apigw.LambdaIntegration(session_function, allow_test_invoke=False)
    add, params, root = routes.add, routes.params, routes.root
    sessions = root.add_resource("sessions")
    add(
        sessions,
        "POST",
        session_api,
        models=routes.json_body("CreateSessionRequest"),
        parameters=params(headers=("Idempotency-Key",)),
    )
    session = sessions.add_resource("{id}")
    add(session, "GET", session_api, parameters=params("id"))
    add(session, "DELETE", session_api, parameters=params("id"))
    # Through the Lambda, not a direct StartExecution: API Gateway cannot check the id's pattern.
    add(
        session.add_resource("handoff"),
        "POST",
        session_api,
        models=routes.json_body("HandoffRequest"),
        parameters=params("id", headers=("Idempotency-Key",)),
    )
    add(session.add_resource("turns"), "GET", session_api, parameters=params("id", query=("limit", "cursor")))
    add(
        session.add_resource("rewind"),
        "POST",
        session_api,
        models=routes.json_body("RewindRequest"),
        parameters=params("id", headers=("Idempotency-Key",)),
    )
    customer_sessions = root.add_resource("customers").add_resource("{id}").add_resource("sessions")
    add(customer_sessions, "GET", session_api, parameters=params("id", query=("limit", "cursor")))
    add(root.add_resource("executions").add_resource("{id}"), "GET", session_api, parameters=params("id"))


def _start_routes(
    scope: Construct, routes: _Routes, config: StageConfig, orchestration: OrchestrationStack
) -> dict[str, StepFunctionsStartExecution]:
    """The direct StartExecution routes (no Lambda, no path parameter to check): cleanup, export."""
    caller = {"requested_by": InputField.authorizer("sub"), "role": InputField.authorizer("role")}
    cors = routes.rest.cors_headers()
    starts: dict[str, tuple[sfn.IStateMachine, dict[str, Any]]] = {
        "StartCleanup": (
            orchestration.cleanup_state_machine,
            {
                "older_than_seconds": InputField.body(
                    "older_than_seconds", default_json=str(config.cleanup_grace_seconds)
                ),
                **caller,
            },
        ),
        "StartExport": (
            orchestration.export_state_machine,
            # The requester's verified e-mail (empty when the token has none) is where the export
            # notifier writes; it comes from the authorizer, never from the body.
            {"reason": InputField.body("reason"), **caller, "requested_by_email": InputField.authorizer("email")},
        ),
    }
    integrations = {
        construct_id: StepFunctionsStartExecution(
            scope, construct_id, state_machine=machine, input_fields=fields, cors_headers=cors
        )
        for construct_id, (machine, fields) in starts.items()
    }

    def start(resource: apigw.IResource, construct_id: str, model: str, *path: str) -> None:
        integration = integrations[construct_id]
        routes.add(
            resource,
            "POST",
            integration.integration,
            models=routes.json_body(model),
            parameters=routes.params(*path, headers=("Idempotency-Key",)),
            method_responses=integration.method_responses,
        )

    admin = routes.root.add_resource("admin")
    start(admin.add_resource("cleanup"), "StartCleanup", "CleanupRequest")
    start(admin.add_resource("export"), "StartExport", "ExportRequest")
    return integrations


def _agent_routes(
    scope: Construct,
    routes: _Routes,
    storage: StorageStack,
    orchestration: OrchestrationStack,
    functions: StageFunctions,
) -> lambda_.Function:
    """The agent console's routes: accept a handoff, message the customer, close the handoff, presence, inbox."""
    agent_function = functions(
        scope, "AgentApi", "lambdas.api.agent.handler", {"TABLE_NAME": storage.table.table_name}
    ).function
    storage.sessions.grant_read_write_data(agent_function)
    orchestration.grant_agent_routes(agent_function)
    agent_api = apigw.LambdaIntegration(agent_function, allow_test_invoke=False)
    handoff = routes.root.add_resource("handoffs").add_resource("{session_id}")
    routes.add(handoff.add_resource("accept"), "POST", agent_api, parameters=routes.params("session_id"))
    routes.add(
        handoff.add_resource("messages"),
        "POST",
        agent_api,
        parameters=routes.params("session_id", headers=("Idempotency-Key",)),
    )
    routes.add(
        handoff.add_resource("close"),
        "POST",
        agent_api,
        parameters=routes.params("session_id"),
        models=routes.json_body("CloseHandoffRequest"),
    )
    presence = routes.root.add_resource("agents").add_resource("me").add_resource("presence")
    routes.add(presence, "POST", agent_api, models=routes.json_body("PresenceRequest"))
    inbox = routes.root.resource_for_path("/agents/me/inbox")
    routes.add(inbox, "GET", agent_api, parameters=routes.params(query=("limit", "cursor")))
    return agent_function


def _registry_routes(
    scope: Construct, routes: _Routes, storage: StorageStack, functions: StageFunctions
) -> lambda_.Function:
    """The agent registry (admins): register, list, read, update, retire. Its own function, with
    the table only (no workflow or WebSocket permissions, which the agent routes need)."""
    registry_function = functions(
        scope, "AgentRegistryApi", "lambdas.api.admin_agents.handler", {"TABLE_NAME": storage.table.table_name}
    ).function
    storage.sessions.grant_read_write_data(registry_function)
    registry_api = apigw.LambdaIntegration(registry_function, allow_test_invoke=False)
    add, params = routes.add, routes.params
    admin = routes.root.get_resource("admin") or routes.root.add_resource("admin")
    agents = admin.add_resource("agents")
    add(
        agents,
        "POST",
        registry_api,
        models=routes.json_body("RegisterAgentRequest"),
        parameters=params(headers=("Idempotency-Key",)),
    )
    add(agents, "GET", registry_api, parameters=params(query=("limit", "cursor", "status")))
    agent = agents.add_resource("{agent_id}")
    add(agent, "GET", registry_api, parameters=params("agent_id"))
    add(agent, "PATCH", registry_api, parameters=params("agent_id"), models=routes.json_body("UpdateAgentRequest"))
    add(agent.add_resource("retire"), "POST", registry_api, parameters=params("agent_id"))
    return registry_function


def _status_routes(routes: _Routes, session_function: lambda_.Function) -> None:
    """Sessions by status, on the session Lambda (its table grant covers the StatusIndex).

    Added last: the deployment's logical id hashes the methods in the order they were added.
    ``status`` is required at the gateway; its values, ``limit`` and ``cursor`` are checked in
    the Lambda (a query string has no model to check them against).
    """
    admin = routes.root.get_resource("admin") or routes.root.add_resource("admin")
    routes.add(
        admin.add_resource("sessions"),
        "GET",
        apigw.LambdaIntegration(session_function, allow_test_invoke=False),
        parameters=routes.params(query=("limit", "cursor"), required_query=("status",)),
    )


# ------------------------------------------------------------------ review links
def _review_routes(routes: _Routes, orchestration: OrchestrationStack) -> None:
    """``GET`` (confirmation page) and ``POST`` (decision) ``/reviews/{id}/approve|reject``: the
    approval gate's own routes; the signed link is the credential."""
    route = access.route("GET", "/reviews/{id}/approve")
    if not route.public:
        raise ValueError("GET /reviews/{id}/approve must be public in contracts.access.ROUTES")
    review_methods = orchestration.approval_gate.add_review_routes(
        routes.root,
        method_options=apigw.MethodOptions(
            operation_name="GetReviewsId",
            authorization_type=apigw.AuthorizationType.NONE,
            request_validator=routes.rest.params_validator,
            request_parameters=routes.params("id"),
        ),
    )
    for method in review_methods.values():
        Validations.of(method).acknowledge(
            Acknowledgment(
                id="AwsSolutions-APIG4",
                reason="Review links are opened from an e-mail by a reviewer without an API token; "
                "the HMAC-SHA256 signature and expiry inside the link are the credential (checked "
                "before any data is read).",
            )
        )


# ------------------------------------------------------------------ end of review links


def _customer_data_routes(
    scope: Construct,
    routes: _Routes,
    storage: StorageStack,
    orchestration: OrchestrationStack,
    functions: StageFunctions,
) -> lambda_.Function:
    """A customer's data as a whole: ``DELETE /customers/{id}/data`` starts its erasure, ``GET
    /customers/{id}/data/erasure`` reads the receipt. Its own function: the table and StartExecution
    of the erasure workflow only."""
    function = functions(
        scope,
        "CustomerDataApi",
        "lambdas.api.customers.handler",
        {
            "TABLE_NAME": storage.table.table_name,
            "ERASURE_STATE_MACHINE_ARN": orchestration.erasure_state_machine.state_machine_arn,
        },
    ).function
    storage.sessions.grant_read_write_data(function)
    orchestration.erasure.grant_start_execution(function)
    integration = apigw.LambdaIntegration(function, allow_test_invoke=False)
    customer = routes.root.resource_for_path("/customers/{id}")
    data = customer.add_resource("data")
    routes.add(data, "DELETE", integration, parameters=routes.params("id", headers=("Idempotency-Key",)))
    routes.add(data.add_resource("erasure"), "GET", integration, parameters=routes.params("id"))
    return function


def _gateway_checks(
    scope: Construct, config: StageConfig, rest: HardenedRestApi, storage: StorageStack
) -> RegionalWebAcl | None:
    """cdk-nag acknowledgements that hold for the whole gateway, and the stage's WAF when enabled."""
    api = rest.api
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
            reason="Callers present the stage's identity tokens (its Cognito pool or OIDC issuer), "
            "verified against the issuer's JWKS by the Lambda TOKEN authorizer, which answers a "
            "least-privilege policy per role (the routes of the access table) and passes sub, role and "
            "verified e-mail to the integrations; a Cognito authorizer cannot map groups to routes.",
        )
    )
    if config.waf_enabled:
        web_acl = RegionalWebAcl(
            scope,
            "WebAcl",
            rate_limit=config.waf_ip_rate_limit,
            evaluation_window_seconds=WAF_WINDOW_SECONDS,
            log_encryption_key=storage.key,
            log_retention=log_retention(config.log_retention_days),
            log_removal_policy=config.resource_removal_policy,
        )
        web_acl.associate("RestApiStage", rest.stage.stage_arn)
        return web_acl
    Validations.of(rest.stage).acknowledge(
        Acknowledgment(
            id="AwsSolutions-APIG3",
            reason=f"Stage {config.name} runs without WAF by configuration (waf_enabled=false): a "
            "development stage behind throttling and the authorizer; production enables it.",
        )
    )
    return None


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
    body = resource_finding(scope, machine.state_machine_name, owner=machine).removeprefix("Resource::")
    return f"Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:{body}:*"


def _operation_name(method: str, path: str) -> str:
    """``GET /sessions/{id}/turns`` -> ``GetSessionsIdTurns`` (unique per method and path)."""
    words = [part.strip("{}") for part in path.split("/") if part]
    return method.capitalize() + "".join(word[:1].upper() + word[1:].replace("_", "") for word in words)
