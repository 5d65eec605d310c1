"""ApiStack's WebSocket chat API, onboarding workflow and notifier, in the synthesized dev and prod templates."""

from __future__ import annotations

import json
from typing import Any

import pytest

from embedded.synth import SynthesizedStage
from lambdas.shared.tokens import ISSUER_VARIABLES
from stacks.config import foundation_model_of

Template = dict[str, Any]


def resources(template: Template, kind: str) -> dict[str, dict[str, Any]]:
    return {lid: res for lid, res in template["Resources"].items() if res["Type"] == kind}


def function_id(template: Template, handler: str) -> str:
    [found] = [
        lid
        for lid, res in resources(template, "AWS::Lambda::Function").items()
        if res["Properties"]["Handler"] == handler
    ]
    return found


def statements_of(template: Template, handler: str) -> list[dict[str, Any]]:
    """Every IAM statement attached to the role of the function with ``handler``."""
    role = template["Resources"][function_id(template, handler)]["Properties"]["Role"]["Fn::GetAtt"][0]
    found: list[dict[str, Any]] = []
    for policy in resources(template, "AWS::IAM::Policy").values():
        if {"Ref": role} in policy["Properties"]["Roles"]:
            found.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return found


def actions(statement: dict[str, Any]) -> list[str]:
    value = statement["Action"]
    return [value] if isinstance(value, str) else list(value)


def flatten(value: Any) -> str:
    """A CloudFormation value as text: Fn::Join parts concatenated, references as <Logical.Attr>."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(flatten(part) for part in parts)
    if isinstance(value, dict) and "Ref" in value:
        return f"<{value['Ref']}>"
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return "<{}.{}>".format(*value["Fn::GetAtt"])
    return json.dumps(value, sort_keys=True)


def api(stage: SynthesizedStage) -> Template:
    return stage.templates["Api"]


def only(mapping: dict[str, Any]) -> tuple[str, Any]:
    assert len(mapping) == 1, list(mapping)
    return next(iter(mapping.items()))


# ------------------------------------------------------------------ API, routes, authorizer


def test_websocket_api_routes_on_the_action_field(any_stage: SynthesizedStage) -> None:
    any_stage.template("Api").has_resource_properties(
        "AWS::ApiGatewayV2::Api",
        {"ProtocolType": "WEBSOCKET", "RouteSelectionExpression": "$request.body.action"},
    )
    assert any_stage.stage.api.websocket_api is any_stage.stage.api.chat_api.api


def test_routes_and_their_lambda_integrations(any_stage: SynthesizedStage) -> None:
    template = api(any_stage)
    expected = {
        "$connect": "lambdas.ws.connect.handler",
        "$disconnect": "lambdas.ws.disconnect.handler",
        "$default": "lambdas.ws.default.handler",
        "sendMessage": "lambdas.ws.message.handler",
        "rewind": "lambdas.ws.message.handler",  # the Message Lambda hands rewind frames to lambdas.ws.rewind
        "continue": "lambdas.ws.message.handler",  # and continue frames to lambdas.ws.continuation
    }
    routes = {
        r["Properties"]["RouteKey"]: r["Properties"] for r in resources(template, "AWS::ApiGatewayV2::Route").values()
    }
    assert set(routes) == set(expected)
    integrations = resources(template, "AWS::ApiGatewayV2::Integration")
    for key, handler in expected.items():
        target = flatten(routes[key]["Target"])
        integration = integrations[target.removeprefix("integrations/").strip("<>")]["Properties"]
        assert integration["IntegrationType"] == "AWS_PROXY"
        assert f"<{function_id(template, handler)}.Arn>" in flatten(integration["IntegrationUri"])


def test_only_connect_is_authorized_by_the_request_authorizer_on_the_token_query(any_stage: SynthesizedStage) -> None:
    template = api(any_stage)
    authorizer_id, authorizer = only(resources(template, "AWS::ApiGatewayV2::Authorizer"))
    props = authorizer["Properties"]
    assert props["AuthorizerType"] == "REQUEST"
    assert props["IdentitySource"] == ["route.request.querystring.token"]
    assert f"<{function_id(template, 'lambdas.ws.authorizer.handler')}.Arn>" in flatten(props["AuthorizerUri"])
    for route in resources(template, "AWS::ApiGatewayV2::Route").values():
        p = route["Properties"]
        if p["RouteKey"] == "$connect":
            assert (p["AuthorizationType"], p["AuthorizerId"]) == ("CUSTOM", {"Ref": authorizer_id})
        else:
            assert p["AuthorizationType"] == "NONE"


def test_default_route_returns_its_error_frame_to_the_client(any_stage: SynthesizedStage) -> None:
    template = api(any_stage)
    [default_route] = [
        lid
        for lid, r in resources(template, "AWS::ApiGatewayV2::Route").items()
        if r["Properties"]["RouteKey"] == "$default"
    ]
    any_stage.template("Api").has_resource_properties(
        "AWS::ApiGatewayV2::RouteResponse", {"RouteId": {"Ref": default_route}, "RouteResponseKey": "$default"}
    )


def test_authorizer_verifies_with_the_rest_authorizers_issuer(any_stage: SynthesizedStage) -> None:
    # One issuer for both APIs: the same ISSUER_* variables, and no secret to read
    template = api(any_stage)

    def issuer_of(handler: str) -> dict[str, Any]:
        variables = template["Resources"][function_id(template, handler)]["Properties"]["Environment"]["Variables"]
        return {k: v for k, v in variables.items() if k.startswith("ISSUER_")}

    assert issuer_of("lambdas.ws.authorizer.handler") == issuer_of("lambdas.api.authorizer.handler")
    assert set(issuer_of("lambdas.ws.authorizer.handler")) == set(ISSUER_VARIABLES)
    assert not any(
        a.startswith("secretsmanager:")
        for s in statements_of(template, "lambdas.ws.authorizer.handler")
        for a in actions(s)
    )


# ------------------------------------------------------------------ stage


def test_stage_is_named_after_the_config_throttled_and_access_logged(any_stage: SynthesizedStage) -> None:
    config = any_stage.stage.config
    _, stage = only(resources(api(any_stage), "AWS::ApiGatewayV2::Stage"))
    props = stage["Properties"]
    assert props["StageName"] == config.name
    assert props["AutoDeploy"] is True
    assert props["DefaultRouteSettings"] == {
        "ThrottlingBurstLimit": config.capacity.limits.ws_default_burst,
        "ThrottlingRateLimit": config.capacity.limits.ws_default_rate,
    }
    log_format = json.loads(props["AccessLogSettings"]["Format"])
    assert {"requestId", "connectionId", "routeKey", "eventType", "status"} <= set(log_format)
    assert "token" not in props["AccessLogSettings"]["Format"].lower()  # no query strings in access logs
    log_group = props["AccessLogSettings"]["DestinationArn"]["Fn::GetAtt"][0]
    assert api(any_stage)["Resources"][log_group]["Properties"]["RetentionInDays"] == config.log_retention_days
    assert any_stage.stage.api.websocket_stage.stage_name == config.name


# ------------------------------------------------------------------ onboarding workflow


def onboarding(stage: SynthesizedStage) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The onboarding state machine: logical id, properties, and its definition with refs as <Id.Attr>."""
    template = api(stage)
    [(lid, machine)] = [
        (lid, m) for lid, m in resources(template, "AWS::StepFunctions::StateMachine").items() if "Onboarding" in lid
    ]
    return lid, machine["Properties"], json.loads(flatten(machine["Properties"]["DefinitionString"]))


def test_onboarding_is_an_express_machine_with_logs_and_tracing(any_stage: SynthesizedStage) -> None:
    _, props, _ = onboarding(any_stage)
    assert props["StateMachineType"] == "EXPRESS"
    assert props["TracingConfiguration"] == {"Enabled": True}
    logging = props["LoggingConfiguration"]
    assert logging["Level"] == "ALL"
    assert logging["IncludeExecutionData"] is any_stage.stage.config.log_execution_data


def test_onboarding_definition_prepares_then_delivers_with_bounded_jittered_retries(
    any_stage: SynthesizedStage,
) -> None:
    template = api(any_stage)
    _, _, definition = onboarding(any_stage)
    states = definition["States"]
    assert definition["StartAt"] == "Prepare"
    assert definition["TimeoutSeconds"] <= 300
    prepare, deliver = states["Prepare"], states["DeliverFrame"]
    assert prepare["Resource"].endswith(":states:::lambda:invoke")
    assert prepare["Parameters"]["FunctionName"] == f"<{function_id(template, 'lambdas.ws.onboarding.handler')}.Arn>"
    assert prepare["Parameters"]["Payload"]["step"] == "onboard"
    assert prepare["Next"] == "DeliverFrame"
    assert deliver["Parameters"]["FunctionName"] == f"<{function_id(template, 'lambdas.ws.onboarding.deliver')}.Arn>"
    assert deliver["Parameters"]["Payload"]["frame.$"] == "$.onboarding.frame"
    [not_ready] = [r for r in deliver["Retry"] if r["ErrorEquals"] == ["ConnectionNotReady"]]
    assert not_ready["JitterStrategy"] == "FULL"
    assert 1 <= not_ready["MaxAttempts"] <= 20
    assert not_ready["MaxDelaySeconds"] <= 60
    for name in ("Prepare", "DeliverFrame", "ConnectionAbandoned", "DeliverFailureFrame"):
        transient = [r for r in states[name]["Retry"] if "Lambda.ServiceException" in r["ErrorEquals"]]
        assert transient, name
        assert transient[0]["JitterStrategy"] == "FULL"
    catches = {tuple(c["ErrorEquals"]): c["Next"] for c in deliver["Catch"]}
    assert catches == {("ConnectionNotReady",): "ConnectionAbandoned", ("States.ALL",): "FailureFrame"}
    assert {c["Next"] for c in prepare["Catch"]} == {"FailureFrame"}
    assert states["ConnectionAbandoned"]["Parameters"]["Payload"]["step"] == "abandon"
    assert states["OnboardingFailed"]["Type"] == "Fail"


def test_connect_starts_only_the_onboarding_machine(any_stage: SynthesizedStage) -> None:
    template = api(any_stage)
    machine_id, _, _ = onboarding(any_stage)
    fn = template["Resources"][function_id(template, "lambdas.ws.connect.handler")]
    assert fn["Properties"]["Environment"]["Variables"]["ONBOARDING_STATE_MACHINE_ARN"] == {"Ref": machine_id}
    starts = [s for s in statements_of(template, "lambdas.ws.connect.handler") if "states:StartExecution" in actions(s)]
    assert [s["Resource"] for s in starts] == [{"Ref": machine_id}]


# ------------------------------------------------------------------ IAM scope


@pytest.mark.parametrize(
    "handler",
    ["lambdas.ws.message.handler", "lambdas.ws.onboarding.deliver", "lambdas.events.customer_notifier.handler"],
)
def test_manage_connections_is_scoped_to_post_on_this_apis_stage(any_stage: SynthesizedStage, handler: str) -> None:
    template = api(any_stage)
    api_id, _ = only(resources(template, "AWS::ApiGatewayV2::Api"))
    manage = [s for s in statements_of(template, handler) if any(a.startswith("execute-api:") for a in actions(s))]
    assert len(manage) == 1
    assert actions(manage[0]) == ["execute-api:ManageConnections"]
    assert flatten(manage[0]["Resource"]) == (
        f"arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:<{api_id}>/"
        f"{any_stage.stage.config.name}/POST/@connections/*"
    )


def test_no_other_function_may_manage_connections(any_stage: SynthesizedStage) -> None:
    template = api(any_stage)
    allowed = {
        function_id(template, h)
        for h in (
            "lambdas.ws.message.handler",
            "lambdas.ws.onboarding.deliver",
            "lambdas.events.customer_notifier.handler",
        )
    }
    agent = [
        lid
        for lid, r in resources(template, "AWS::Lambda::Function").items()
        if r["Properties"]["Handler"] == "lambdas.api.agent.handler"
    ]
    allowed.update(agent)
    for lid in resources(template, "AWS::Lambda::Function"):
        handler = template["Resources"][lid]["Properties"]["Handler"]
        granted = any("execute-api:ManageConnections" in actions(s) for s in statements_of(template, handler))
        assert granted == (lid in allowed), handler


def test_bedrock_is_scoped_to_the_configured_model_and_its_fallback(any_stage: SynthesizedStage) -> None:
    template = api(any_stage)
    model = any_stage.stage.config.bedrock_model_id
    fallback = any_stage.stage.config.model_resilience.fallback_model_id
    assert model is not None
    assert fallback is not None
    fn = template["Resources"][function_id(template, "lambdas.ws.message.handler")]
    assert fn["Properties"]["Environment"]["Variables"]["BEDROCK_MODEL_ID"] == model
    assert fn["Properties"]["Environment"]["Variables"]["BEDROCK_FALLBACK_MODEL_ID"] == fallback
    bedrock = [
        s
        for s in statements_of(template, "lambdas.ws.message.handler")
        if any(a.startswith("bedrock:") for a in actions(s))
    ]
    # ConverseStream on the models, and the stage's own guardrail (the calls name it)
    guardrail = [s for s in bedrock if actions(s) == ["bedrock:ApplyGuardrail"]]
    assert len(guardrail) == 1
    assert "GuardrailArn" in str(guardrail[0]["Resource"])
    models = [s for s in bedrock if s not in guardrail]
    assert {a for s in models for a in actions(s)} == {"bedrock:InvokeModelWithResponseStream"}
    # Both stages name cross-region inference profiles: each profile, and its model wherever it routes
    assert sorted(flatten(r) for s in models for r in s["Resource"]) == sorted(
        [
            f"arn:<AWS::Partition>:bedrock:<AWS::Region>:<AWS::AccountId>:inference-profile/{model}",
            f"arn:<AWS::Partition>:bedrock:*::foundation-model/{foundation_model_of(model)}",
            "arn:<AWS::Partition>:bedrock:<AWS::Region>:<AWS::AccountId>:inference-profile/"
            "global.anthropic.claude-sonnet-4-6",
            "arn:<AWS::Partition>:bedrock:*::foundation-model/anthropic.claude-sonnet-4-6",
        ]
    )


def test_model_fallbacks_alarm_sums_every_model_caller_at_the_stages_threshold(any_stage: SynthesizedStage) -> None:
    threshold = any_stage.stage.config.model_resilience.fallback_alarm_threshold
    alarms = any_stage.template("Api").find_resources(
        "AWS::CloudWatch::Alarm",
        {"Properties": {"AlarmName": f"MangaAssist-{any_stage.stage.config.name}-Api-ModelFallbacks"}},
    )
    ((_, alarm),) = alarms.items()
    properties = alarm["Properties"]
    assert properties["Threshold"] == threshold
    assert properties["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    queries = properties["Metrics"]
    expression = next(q["Expression"] for q in queries if "Expression" in q)
    assert expression == "m0 + m1 + m2"
    services = sorted(
        q["MetricStat"]["Metric"]["Dimensions"][0]["Value"]
        for q in queries
        if "MetricStat" in q and q["MetricStat"]["Metric"]["MetricName"] == "ModelFallbacks"
    )
    assert services == ["SessionApi", "SummaryGenerator", "WsMessage"]
    assert all(q["MetricStat"]["Period"] == 300 for q in queries if "MetricStat" in q)


def test_table_access_names_the_indexes_and_has_no_wildcards(any_stage: SynthesizedStage) -> None:
    template = api(any_stage)
    for handler in ("lambdas.ws.message.handler", "lambdas.ws.connect.handler", "lambdas.ws.disconnect.handler"):
        for statement in statements_of(template, handler):
            if any(a.startswith("dynamodb:") for a in actions(statement)):
                for resource in statement["Resource"]:
                    assert not flatten(resource).endswith("*"), (handler, resource)
    connect_actions = {a for s in statements_of(template, "lambdas.ws.connect.handler") for a in actions(s)}
    # $connect holds the customer's connection slots (put, update) and deletes nothing
    assert {"dynamodb:PutItem", "dynamodb:UpdateItem"} <= connect_actions
    assert not {"dynamodb:DeleteItem", "dynamodb:BatchWriteItem"} & connect_actions


# ------------------------------------------------------------------ customer notifier


def test_customer_notifier_consumes_its_queue_with_partial_batch_failures(any_stage: SynthesizedStage) -> None:
    template = api(any_stage)
    notifier = function_id(template, "lambdas.events.customer_notifier.handler")
    any_stage.template("Api").has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {"FunctionName": {"Ref": notifier}, "FunctionResponseTypes": ["ReportBatchItemFailures"], "BatchSize": 10},
    )
    variables = template["Resources"][notifier]["Properties"]["Environment"]["Variables"]
    assert "TABLE_NAME" in variables
    assert flatten(variables["WEBSOCKET_ENDPOINT"]).startswith("https://<")
    assert flatten(variables["WEBSOCKET_ENDPOINT"]).endswith(f"/{any_stage.stage.config.name}")


def test_handlers_get_the_settings_they_read(dev: SynthesizedStage) -> None:
    template = api(dev)
    for handler in ("lambdas.ws.connect.handler", "lambdas.ws.disconnect.handler", "lambdas.ws.message.handler",
                    "lambdas.ws.onboarding.handler"):  # fmt: skip
        variables = template["Resources"][function_id(template, handler)]["Properties"]["Environment"]["Variables"]
        assert variables["SESSION_TTL_HOURS"] == str(dev.stage.config.session_ttl_hours), handler
        assert variables["CLEANUP_SHARDS"] == str(dev.stage.config.cleanup_shards), handler
        assert "TABLE_NAME" in variables


def test_agent_route_gets_the_websocket_endpoint(any_stage: SynthesizedStage) -> None:
    template = api(any_stage)
    agent = template["Resources"][function_id(template, "lambdas.api.agent.handler")]
    endpoint = flatten(agent["Properties"]["Environment"]["Variables"]["WEBSOCKET_ENDPOINT"])
    api_id, _ = only(resources(template, "AWS::ApiGatewayV2::Api"))
    assert endpoint.startswith(f"https://<{api_id}>.execute-api.")
    assert endpoint.endswith(f"/{any_stage.stage.config.name}")


@pytest.fixture(scope="module")
def echo_stage() -> SynthesizedStage:
    """dev without a model: the stage config chooses the echo responder."""
    from embedded.synth import stage_config, synthesize
    from stacks.config import with_overrides

    config = with_overrides(stage_config("dev"), name="echo", bedrock_model_id=None)
    return synthesize(config)["echo"]


@pytest.mark.slow
def test_stage_without_a_model_has_no_bedrock_setting_or_permission(echo_stage: SynthesizedStage) -> None:
    template = api(echo_stage)
    variables = template["Resources"][function_id(template, "lambdas.ws.message.handler")]["Properties"]
    assert "BEDROCK_MODEL_ID" not in variables["Environment"]["Variables"]
    for statement in statements_of(template, "lambdas.ws.message.handler"):
        assert not any(a.startswith("bedrock:") for a in actions(statement))
