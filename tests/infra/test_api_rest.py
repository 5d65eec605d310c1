"""ApiStack, REST part: every route, authorizer, validator and model; direct integrations; gateway settings."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from aws_cdk.assertions import Match

from embedded.synth import SynthesizedStage
from lambdas.api import access
from lambdas.api.validation import BODY_MODELS, gateway_schema
from lambdas.shared.tokens import ISSUER_VARIABLES

#: Direct StartExecution routes -> (integration construct id, Orchestration output name fragment, model)
DIRECT = {
    ("POST", "/admin/cleanup"): ("StartCleanup", "Cleanup", "CleanupRequest"),
    ("POST", "/admin/export"): ("StartExport", "Export", "ExportRequest"),
}
LAMBDA_HANDLERS = {
    "/handoffs": "lambdas.api.agent.handler",
    "/agents": "lambdas.api.agent.handler",  # an agent's own presence
    "/reviews": "gate_runtime.decide.handler",  # the approval gate's own decision function
    "/admin/agents": "lambdas.api.admin_agents.handler",  # the agent registry
    "/customers/{id}/data": "lambdas.api.customers.handler",  # a customer's erasure and its receipt
}


def _resources(stage: SynthesizedStage, kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in stage.templates["Api"]["Resources"].items() if v["Type"] == kind}


def _paths(stage: SynthesizedStage) -> dict[str, str]:
    """Logical id of each API Gateway resource -> its full path."""
    resources = _resources(stage, "AWS::ApiGateway::Resource")

    def path(logical_id: str) -> str:
        props = resources[logical_id]["Properties"]
        parent = props["ParentId"]
        prefix = path(parent["Ref"]) if "Ref" in parent else ""
        return f"{prefix}/{props['PathPart']}"

    return {logical_id: path(logical_id) for logical_id in resources}


def _methods(stage: SynthesizedStage) -> dict[tuple[str, str], dict[str, Any]]:
    """(HTTP method, path) -> Properties of the method."""
    paths = _paths(stage)
    result = {}
    for resource in _resources(stage, "AWS::ApiGateway::Method").values():
        props = resource["Properties"]
        ref = props["ResourceId"]
        path = paths[ref["Ref"]] if "Ref" in ref else "/"
        result[(props["HttpMethod"], path)] = props
    return result


def _function_handler(stage: SynthesizedStage, uri: Any) -> str:
    """The Handler of the function an integration URI names, in this stack or (by output) another."""
    for part in uri["Fn::Join"][1]:
        if isinstance(part, dict) and "Fn::GetAtt" in part:
            return str(stage.templates["Api"]["Resources"][part["Fn::GetAtt"][0]]["Properties"]["Handler"])
        if isinstance(part, dict) and "Fn::GetStackOutput" in part:
            output = part["Fn::GetStackOutput"]
            template = stage.templates[output["StackName"].rsplit("-", 1)[-1]]
            logical_id = template["Outputs"][output["OutputName"]]["Value"]["Fn::GetAtt"][0]
            return str(template["Resources"][logical_id]["Properties"]["Handler"])
    raise AssertionError(f"no function in the integration URI {uri!r}")


def _logical_id(stage: SynthesizedStage, kind: str, prefix: str) -> str:
    matches = [k for k in _resources(stage, kind) if k.startswith(prefix)]
    assert len(matches) == 1, (kind, prefix, matches)
    return matches[0]


# ---------------------------------------------------------------- routes


def test_every_route_of_the_access_table_exists_and_nothing_else(any_stage: SynthesizedStage) -> None:
    methods = {key for key in _methods(any_stage) if key[0] != "OPTIONS"}
    assert methods == {(route.method, route.path) for route in access.ROUTES}


def test_protected_routes_use_the_token_authorizer_public_ones_none(any_stage: SynthesizedStage) -> None:
    authorizer = _logical_id(any_stage, "AWS::ApiGateway::Authorizer", "RestApiJwtAuthorizer")
    for (method, path), props in _methods(any_stage).items():
        if method == "OPTIONS" or access.route(method, path).public:
            assert props["AuthorizationType"] == "NONE", (method, path)
            assert "AuthorizerId" not in props
        else:
            assert props["AuthorizationType"] == "CUSTOM", (method, path)
            assert props["AuthorizerId"] == {"Ref": authorizer}


def test_token_authorizer_settings(any_stage: SynthesizedStage) -> None:
    any_stage.template("Api").has_resource_properties(
        "AWS::ApiGateway::Authorizer",
        {
            "Type": "TOKEN",
            "IdentitySource": "method.request.header.Authorization",
            "IdentityValidationExpression": "^Bearer [-0-9A-Za-z_]+\\.[-0-9A-Za-z_]+\\.[-0-9A-Za-z_]+$",
            "AuthorizerResultTtlInSeconds": any_stage.stage.config.authorizer_cache_seconds,
        },
    )
    # The issuer's settings reach the authorizer from the stage's identity (tests/infra/test_identity.py)
    function = _resources(any_stage, "AWS::Lambda::Function")
    authorizer = next(v for v in function.values() if v["Properties"]["Handler"] == "lambdas.api.authorizer.handler")
    variables = authorizer["Properties"]["Environment"]["Variables"]
    assert {name for name in variables if name.startswith("ISSUER_")} == set(ISSUER_VARIABLES)


def test_no_shared_signing_secret_exists(any_stage: SynthesizedStage) -> None:
    # Tokens are verified with the issuer's public keys: the API holds no secret to sign them with
    assert _resources(any_stage, "AWS::SecretsManager::Secret") == {}
    function = _resources(any_stage, "AWS::Lambda::Function")
    assert not any("JWT_SECRET_ARN" in json.dumps(f["Properties"].get("Environment", {})) for f in function.values())


def test_every_method_with_input_is_validated(any_stage: SynthesizedStage) -> None:
    body = _logical_id(any_stage, "AWS::ApiGateway::RequestValidator", "RestApiBodyAndParametersValidator")
    params = _logical_id(any_stage, "AWS::ApiGateway::RequestValidator", "RestApiParametersValidator")
    validators = _resources(any_stage, "AWS::ApiGateway::RequestValidator")
    assert validators[body]["Properties"]["ValidateRequestBody"] is True
    assert validators[body]["Properties"]["ValidateRequestParameters"] is True
    assert validators[params]["Properties"]["ValidateRequestParameters"] is True
    for (method, path), props in _methods(any_stage).items():
        if method == "OPTIONS":
            continue
        expected = body if "RequestModels" in props else params
        assert props["RequestValidatorId"] == {"Ref": expected}, (method, path)
        for name in [part.strip("{}") for part in path.split("/") if part.startswith("{")]:
            assert props["RequestParameters"][f"method.request.path.{name}"] is True, (method, path)


def test_models_are_the_lambda_rules_for_api_gateway(any_stage: SynthesizedStage) -> None:
    # One source: each model's schema is exactly validation.gateway_schema of the Lambda's dict
    models = {v["Properties"]["Name"] if "Name" in v["Properties"] else v["Properties"]["Schema"]["title"]: v
              for v in _resources(any_stage, "AWS::ApiGateway::Model").values()}  # fmt: skip
    assert set(models) == set(BODY_MODELS)
    for name, schema in BODY_MODELS.items():
        assert models[name]["Properties"]["Schema"] == gateway_schema(schema)
        assert models[name]["Properties"]["ContentType"] == "application/json"
    methods = _methods(any_stage)
    expected = {
        ("POST", "/sessions"): "CreateSessionRequest",
        ("POST", "/sessions/{id}/handoff"): "HandoffRequest",
        **{key: value[2] for key, value in DIRECT.items()},
    }
    for key, model in expected.items():
        ref = methods[key]["RequestModels"]["application/json"]["Ref"]
        assert any_stage.templates["Api"]["Resources"][ref]["Properties"]["Schema"]["title"] == model


def test_paging_routes_declare_their_query_parameters(any_stage: SynthesizedStage) -> None:
    methods = _methods(any_stage)
    for key in (("GET", "/sessions/{id}/turns"), ("GET", "/customers/{id}/sessions")):
        params = methods[key]["RequestParameters"]
        assert params["method.request.querystring.limit"] is False
        assert params["method.request.querystring.cursor"] is False


def test_sessions_by_status_requires_the_status_at_the_gateway(any_stage: SynthesizedStage) -> None:
    # Given the listing of sessions by status
    props = _methods(any_stage)[("GET", "/admin/sessions")]
    params = _logical_id(any_stage, "AWS::ApiGateway::RequestValidator", "RestApiParametersValidator")
    # Then the gateway refuses a request without a status; limit and cursor are optional
    assert props["RequestParameters"] == {
        "method.request.querystring.status": True,
        "method.request.querystring.limit": False,
        "method.request.querystring.cursor": False,
    }
    assert props["RequestValidatorId"] == {"Ref": params}
    assert props["AuthorizationType"] == "CUSTOM"
    assert "AuthorizerId" in props
    assert _function_handler(any_stage, props["Integration"]["Uri"]) == "lambdas.api.rest.handler"


def test_session_lambda_may_query_the_status_index(any_stage: SynthesizedStage) -> None:
    policies = [
        p["Properties"]
        for p in _resources(any_stage, "AWS::IAM::Policy").values()
        if any("SessionApi" in json.dumps(role) for role in p["Properties"].get("Roles", []))
    ]
    grants = [
        statement
        for policy in policies
        for statement in policy["PolicyDocument"]["Statement"]
        if "dynamodb:Query" in statement["Action"]
    ]
    assert any("/index/StatusIndex" in json.dumps(statement["Resource"]) for statement in grants)


def test_session_lambda_may_fail_only_the_handoff_workflows_waits(any_stage: SynthesizedStage) -> None:
    # DELETE of a session whose handoff waits for an agent stops that wait, as $disconnect does
    def task_failure_grants(role_name: str) -> list[dict[str, Any]]:
        return [
            statement
            for p in _resources(any_stage, "AWS::IAM::Policy").values()
            if any(role_name in json.dumps(role) for role in p["Properties"].get("Roles", []))
            for statement in p["Properties"]["PolicyDocument"]["Statement"]
            if "states:SendTaskFailure" in json.dumps(statement["Action"])
        ]

    (session,) = task_failure_grants("SessionApi")
    (disconnect,) = task_failure_grants("Disconnect")
    # with StartExecution on the same machine (the handoff route), which CDK merges into one statement
    assert set(session["Action"]) == {"states:SendTaskFailure", "states:StartExecution"}
    assert session["Resource"] == disconnect["Resource"]  # the handoff state machine, nothing else


def test_lambda_routes_reach_the_right_handlers(any_stage: SynthesizedStage) -> None:
    for (method, path), props in _methods(any_stage).items():
        if method == "OPTIONS" or (method, path) in DIRECT:
            continue
        integration = props["Integration"]
        assert integration["Type"] == "AWS_PROXY", (method, path)
        prefixes = [p for p in LAMBDA_HANDLERS if path == p or path.startswith(p + "/")]
        expected = LAMBDA_HANDLERS[max(prefixes, key=len)] if prefixes else "lambdas.api.rest.handler"
        assert _function_handler(any_stage, integration["Uri"]) == expected, (method, path)


def test_session_lambda_settings(any_stage: SynthesizedStage) -> None:
    config = any_stage.stage.config
    any_stage.template("Api").has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Handler": "lambdas.api.rest.handler",
            "Environment": {
                "Variables": Match.object_like(
                    {
                        "CORS_ALLOWED_ORIGINS": ",".join(config.cors_allowed_origins),
                        "SESSION_TTL_HOURS": str(config.session_ttl_hours),
                        "CLEANUP_SHARDS": str(config.cleanup_shards),
                        "STATE_MACHINE_ARNS": Match.any_value(),
                        "HANDOFF_STATE_MACHINE_ARN": Match.any_value(),
                        "TABLE_NAME": Match.any_value(),
                    }
                )
            },
        },
    )


# ---------------------------------------------------------------- direct Step Functions integrations


@pytest.mark.parametrize("route", sorted(DIRECT))
def test_direct_start_execution_integration(any_stage: SynthesizedStage, route: tuple[str, str]) -> None:
    construct_id, workflow, _ = DIRECT[route]
    props = _methods(any_stage)[route]
    integration = props["Integration"]
    # Given the AWS integration calling states:StartExecution with its own role, no passthrough
    assert integration["Type"] == "AWS"
    assert "states:action/StartExecution" in json.dumps(integration["Uri"])
    role = _logical_id(any_stage, "AWS::IAM::Role", f"RestApi{construct_id}Role")
    assert integration["Credentials"] == {"Fn::GetAtt": [role, "Arn"]}
    assert integration["PassthroughBehavior"] == "NEVER"
    # Then its template is the construct's, for this workflow's ARN, with the caller identity fields
    template = integration["RequestTemplates"]["application/json"]
    parts = template["Fn::Join"][1]
    arn = next(part for part in parts if isinstance(part, dict))
    assert f"PublishOutputRef{workflow}" in arn["Fn::GetStackOutput"]["OutputName"]
    text = "".join(part if isinstance(part, str) else "<ARN>" for part in parts)
    assert "$context.authorizer.sub" in text
    assert "$context.authorizer.role" in text
    assert "$input.params().header.get('Idempotency-Key')" in text
    assert "$input.body" not in text
    # And the method answers 202/400/409/500 and accepts the Idempotency-Key header
    assert [r["StatusCode"] for r in props["MethodResponses"]] == ["202", "400", "409", "500"]
    assert props["RequestParameters"]["method.request.header.Idempotency-Key"] is False


def test_handoff_requests_go_through_the_session_lambda_which_checks_the_id(any_stage: SynthesizedStage) -> None:
    # API Gateway cannot check a path parameter's pattern: the Lambda does, then starts the workflow
    props = _methods(any_stage)[("POST", "/sessions/{id}/handoff")]
    assert props["Integration"]["Type"] == "AWS_PROXY"
    assert _function_handler(any_stage, props["Integration"]["Uri"]) == "lambdas.api.rest.handler"
    assert props["RequestParameters"] == {
        "method.request.path.id": True,
        "method.request.header.Idempotency-Key": False,
    }
    assert not any(
        "StartHandoff" in logical_id for logical_id in any_stage.templates["Api"]["Resources"]
    )  # no direct integration (nor its role) is left


@pytest.mark.parametrize("construct_id", ["StartCleanup", "StartExport"])
def test_integration_role_may_only_start_its_workflow(any_stage: SynthesizedStage, construct_id: str) -> None:
    role = _logical_id(any_stage, "AWS::IAM::Role", f"RestApi{construct_id}Role")
    trust = _resources(any_stage, "AWS::IAM::Role")[role]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert [s["Principal"] for s in trust] == [{"Service": "apigateway.amazonaws.com"}]
    policies = [
        p["Properties"]
        for p in _resources(any_stage, "AWS::IAM::Policy").values()
        if {"Ref": role} in p["Properties"]["Roles"]
    ]
    assert len(policies) == 1
    statements = policies[0]["PolicyDocument"]["Statement"]
    assert len(statements) == 2
    assert statements[0]["Action"] == "states:StartExecution"
    assert statements[0]["Effect"] == "Allow"
    workflow = DIRECT[next(k for k, v in DIRECT.items() if v[0] == construct_id)][1]
    assert f"PublishOutputRef{workflow}" in statements[0]["Resource"]["Fn::GetStackOutput"]["OutputName"]
    # the workflow's history is encrypted with the stage key: starting it writes with that key, for it only
    key_use = statements[1]
    assert key_use["Action"] == ["kms:Decrypt", "kms:GenerateDataKey"]
    context = key_use["Condition"]["StringEquals"]["kms:EncryptionContext:aws:states:stateMachineArn"]
    assert f"PublishOutputRef{workflow}" in context["Fn::GetStackOutput"]["OutputName"]


def test_session_lambda_may_only_describe_the_three_workflows_and_start_handoffs(any_stage: SynthesizedStage) -> None:
    role = _logical_id(any_stage, "AWS::IAM::Role", "RestApiSessionApiServiceRole")
    statements = [
        s
        for p in _resources(any_stage, "AWS::IAM::Policy").values()
        if {"Ref": role} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    starts = [s for s in statements if "states:StartExecution" in json.dumps(s["Action"])]
    states = [s for s in statements if "states:" in json.dumps(s["Action"]) and s not in starts]
    assert {json.dumps(s["Action"]) for s in states} == {'"states:DescribeExecution"'}
    resources = [r for s in states for r in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])]
    assert len(resources) == 3
    for resource, workflow in zip(sorted(map(json.dumps, resources)), ("Cleanup", "Export", "Handoff"), strict=True):
        assert ":execution:" in resource
        # arn:...:execution:<that workflow's Name attribute, from its stack>:* (no Fn::Split)
        assert f"PublishOutputFnGetAtt{workflow}" in resource
        assert "Name" in resource
        assert resource.endswith('":*"]]}')
        assert "Fn::Split" not in resource
    # StartExecution only on the handoff state machine itself: its ARN, no wildcard, nothing else
    # (with SendTaskFailure, which DELETE needs on the same machine: CDK merges the two statements)
    assert len(starts) == 1
    assert set(json.loads(json.dumps(starts[0]["Action"]))) <= {"states:StartExecution", "states:SendTaskFailure"}
    assert "PublishOutputRefHandoff" in json.dumps(starts[0]["Resource"])
    assert "*" not in json.dumps(starts[0]["Resource"])


# ---------------------------------------------------------------- gateway settings


def test_stage_logging_tracing_and_throttling(any_stage: SynthesizedStage) -> None:
    config = any_stage.stage.config
    stage = next(iter(_resources(any_stage, "AWS::ApiGateway::Stage").values()))["Properties"]
    assert stage["TracingEnabled"] is True
    assert stage["MethodSettings"] == [
        {
            "DataTraceEnabled": config.log_execution_data,
            "HttpMethod": "*",
            "LoggingLevel": "INFO",
            "MetricsEnabled": True,
            "ResourcePath": "/*",
            "ThrottlingBurstLimit": config.capacity.limits.rest_burst,
            "ThrottlingRateLimit": config.capacity.limits.rest_rate,
        }
    ]
    access_log = json.loads(stage["AccessLogSetting"]["Format"])
    assert {"requestId", "status", "principalId", "resourcePath", "ip"} <= set(access_log)
    assert access_log["tlsVersion"] == "$context.tlsVersion"


def test_the_endpoint_refuses_tls_1_0_and_1_1_and_domain_fronting(any_stage: SynthesizedStage) -> None:
    api = next(iter(_resources(any_stage, "AWS::ApiGateway::RestApi").values()))["Properties"]
    assert api["SecurityPolicy"] == "SecurityPolicy_TLS13_1_2_PFS_PQ_2025_09"
    assert api["EndpointAccessMode"] == "STRICT"


def test_no_execution_data_is_logged_in_prod(prod: SynthesizedStage) -> None:
    stage = next(iter(_resources(prod, "AWS::ApiGateway::Stage").values()))["Properties"]
    assert stage["MethodSettings"][0]["DataTraceEnabled"] is False


def test_log_groups_have_retention_and_the_access_log_a_kms_key(any_stage: SynthesizedStage) -> None:
    retention = any_stage.stage.config.log_retention_days
    groups = _resources(any_stage, "AWS::Logs::LogGroup")
    access_logs = groups[_logical_id(any_stage, "AWS::Logs::LogGroup", "RestApiAccessLogs")]["Properties"]
    assert access_logs["RetentionInDays"] == retention
    assert "DataKey" in json.dumps(access_logs["KmsKeyId"])
    execution = groups[_logical_id(any_stage, "AWS::Logs::LogGroup", "RestApiExecutionLogs")]["Properties"]
    assert execution["RetentionInDays"] == retention
    assert "API-Gateway-Execution-Logs_" in json.dumps(execution["LogGroupName"])


def test_usage_plan_carries_the_stage_limits(any_stage: SynthesizedStage) -> None:
    config = any_stage.stage.config
    any_stage.template("Api").has_resource_properties(
        "AWS::ApiGateway::UsagePlan",
        {"Throttle": {"RateLimit": config.capacity.limits.rest_rate, "BurstLimit": config.capacity.limits.rest_burst}},
    )


def test_account_logging_role_is_set_up(any_stage: SynthesizedStage) -> None:
    any_stage.template("Api").resource_count_is("AWS::ApiGateway::Account", 1)


@pytest.mark.parametrize("response_type", ["DEFAULT_4XX", "DEFAULT_5XX"])
def test_gateway_errors_carry_cors_headers(any_stage: SynthesizedStage, response_type: str) -> None:
    origin = any_stage.stage.config.cors_allowed_origins[0]
    any_stage.template("Api").has_resource_properties(
        "AWS::ApiGateway::GatewayResponse",
        {
            "ResponseType": response_type,
            "ResponseParameters": Match.object_like(
                {"gatewayresponse.header.Access-Control-Allow-Origin": f"'{origin}'"}
            ),
        },
    )


def test_a_refused_token_is_401_with_a_bearer_challenge(any_stage: SynthesizedStage) -> None:
    origin = any_stage.stage.config.cors_allowed_origins[0]
    any_stage.template("Api").has_resource_properties(
        "AWS::ApiGateway::GatewayResponse",
        {
            "ResponseType": "UNAUTHORIZED",
            "StatusCode": "401",
            "ResponseParameters": Match.object_like(
                {
                    "gatewayresponse.header.WWW-Authenticate": "'Bearer'",
                    "gatewayresponse.header.Access-Control-Allow-Origin": f"'{origin}'",
                }
            ),
            "ResponseTemplates": {"application/json": Match.string_like_regexp(r"\$context\.error\.responseType")},
        },
    )


def test_a_body_the_gateway_model_refuses_names_the_failing_field(any_stage: SynthesizedStage) -> None:
    origin = any_stage.stage.config.cors_allowed_origins[0]
    any_stage.template("Api").has_resource_properties(
        "AWS::ApiGateway::GatewayResponse",
        {
            "ResponseType": "BAD_REQUEST_BODY",
            "StatusCode": "400",
            "ResponseParameters": Match.object_like(
                {"gatewayresponse.header.Access-Control-Allow-Origin": f"'{origin}'"}
            ),
            "ResponseTemplates": {
                "application/json": '{"error": {"code": "$context.error.responseType", '
                '"message": "$context.error.message: $context.error.validationErrorString", '
                '"request_id": "$context.requestId"}}'
            },
        },
    )


def test_cors_preflight_answers_only_configured_origins(any_stage: SynthesizedStage) -> None:
    origins = any_stage.stage.config.cors_allowed_origins
    preflights = [props for (method, _), props in _methods(any_stage).items() if method == "OPTIONS"]
    assert preflights
    for props in preflights:
        text = json.dumps(props["Integration"])
        assert origins[0] in text
        if any_stage.stage.config.is_production:
            assert "'*'" not in text


def test_waf_only_where_configured(dev: SynthesizedStage, prod: SynthesizedStage) -> None:
    assert prod.stage.config.waf_enabled
    assert not dev.stage.config.waf_enabled
    dev.template("Api").resource_count_is("AWS::WAFv2::WebACL", 0)
    template = prod.template("Api")
    template.has_resource_properties(
        "AWS::WAFv2::WebACL",
        {
            "Scope": "REGIONAL",
            "DefaultAction": {"Allow": {}},
            "Rules": [
                Match.object_like(
                    {
                        "OverrideAction": {"None": {}},
                        "Statement": {
                            "ManagedRuleGroupStatement": {
                                "VendorName": "AWS",
                                "Name": "AWSManagedRulesAmazonIpReputationList",
                            }
                        },
                    }
                ),
                Match.object_like(
                    {
                        "Statement": {
                            "ManagedRuleGroupStatement": {"VendorName": "AWS", "Name": "AWSManagedRulesCommonRuleSet"}
                        }
                    }
                ),
                Match.object_like(
                    {
                        "Action": {"Block": {}},
                        "Statement": {
                            "RateBasedStatement": {"Limit": 1500, "AggregateKeyType": "IP", "EvaluationWindowSec": 300}
                        },
                    }
                ),
                Match.object_like(
                    {
                        "OverrideAction": {"None": {}},
                        "Statement": {
                            "ManagedRuleGroupStatement": {
                                "VendorName": "AWS",
                                "Name": "AWSManagedRulesKnownBadInputsRuleSet",
                            }
                        },
                    }
                ),
            ],
        },
    )
    # one client's share: prod's REST throttle lets 200/s * 300 s = 60,000 requests through per window
    assert prod.stage.config.waf_ip_rate_limit * 10 <= prod.stage.config.capacity.limits.rest_rate * 300
    logging = next(iter(_resources(prod, "AWS::WAFv2::LoggingConfiguration").values()))["Properties"]
    assert logging["RedactedFields"] == [{"SingleHeader": {"Name": "authorization"}}]
    group = next(
        g["Properties"]
        for g in _resources(prod, "AWS::Logs::LogGroup").values()
        if str(g["Properties"].get("LogGroupName", "")).startswith("aws-waf-logs-")
    )
    assert group["RetentionInDays"] == prod.stage.config.log_retention_days
    assert "DataKey" in json.dumps(group["KmsKeyId"])  # the stage's key, from the storage stack
    stage = _logical_id(prod, "AWS::ApiGateway::Stage", "RestApiDeploymentStage")
    association = next(iter(_resources(prod, "AWS::WAFv2::WebACLAssociation").values()))["Properties"]
    assert stage in json.dumps(association["ResourceArn"])


def test_rest_api_url_is_published_for_review_links(any_stage: SynthesizedStage) -> None:
    any_stage.template("Api").has_resource_properties(
        "AWS::SSM::Parameter",
        {"Name": f"/mangaassist/{any_stage.stage.config.name}/rest-api-url", "Type": "String"},
    )


@pytest.mark.parametrize(("reason", "accepted"), [("billing", True), ("escalated", False), ("manager", False)])
def test_handoff_model_refuses_reasons_reserved_for_the_system(
    any_stage: SynthesizedStage, reason: str, accepted: bool
) -> None:
    # Given the HandoffRequest model exactly as the template hands it to API Gateway
    (model,) = [
        v["Properties"]["Schema"]
        for v in _resources(any_stage, "AWS::ApiGateway::Model").values()
        if v["Properties"]["Schema"].get("title") == "HandoffRequest"
    ]
    # When a caller asks for a handoff with that reason / Then only ordinary skills pass
    errors = list(jsonschema.Draft4Validator(model).iter_errors({"reason": reason}))
    assert (not errors) is accepted, errors


def test_refused_tokens_are_counted_and_left_out_of_the_authorizers_errors_alarm(any_stage: SynthesizedStage) -> None:
    """The authorizer fails each refused token on purpose (API Gateway answers it 401)."""
    from contracts.logs import TOKEN_REFUSED

    filters = _resources(any_stage, "AWS::Logs::MetricFilter")
    (refusals,) = [f["Properties"] for f in filters.values() if TOKEN_REFUSED in f["Properties"]["FilterPattern"]]
    assert refusals["FilterPattern"] == f'{{ $.message = "{TOKEN_REFUSED}" }}'
    transform = refusals["MetricTransformations"][0]
    assert (transform["MetricNamespace"], transform["MetricName"], transform["MetricValue"]) == (
        "MangaAssist",
        "RestTokensRefused",
        "1",
    )
    authorizer_group = _logical_id(any_stage, "AWS::Logs::LogGroup", "RestApiRestAuthorizerLogGroup")
    assert refusals["LogGroupName"] == {"Ref": authorizer_group}

    alarms = [a["Properties"] for a in _resources(any_stage, "AWS::CloudWatch::Alarm").values()]
    (errors,) = [a for a in alarms if a["AlarmName"].endswith("RestAuthorizerErrors")]
    expression = next(m for m in errors["Metrics"] if "Expression" in m)
    assert expression["Expression"] == "FILL(errors, 0) - FILL(deliberate, 0)"
    deliberate = next(m for m in errors["Metrics"] if m["Id"] == "deliberate")["MetricStat"]["Metric"]
    assert deliberate == {"Namespace": "MangaAssist", "MetricName": "RestTokensRefused"}
