"""The REST constructs on their own: a nag-clean test stack around a test state machine, and bad props."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
from aws_cdk import Acknowledgment, App, Duration, Stack, Stage, Validations
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_kms as kms
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Match, Template
from cdk_nag import AwsSolutionsChecks

from constructs_lib import (
    HardenedRestApi,
    InputField,
    JwtTokenAuthorizer,
    RegionalWebAcl,
    SharedFunction,
    StepFunctionsStartExecution,
)
from constructs_lib.rest_api import json_schema
from constructs_lib.token_authorizer import BEARER_JWT

PROBE = Path(__file__).resolve().parents[1] / "fixtures" / "probe_pkg"


def _build(stack: Stack) -> dict[str, Any]:
    """A REST API with one authorized direct StartExecution route on a test state machine."""
    machine = sfn.StateMachine(
        stack,
        "TestMachine",
        definition_body=sfn.DefinitionBody.from_chainable(sfn.Pass(stack, "Done")),
        tracing_enabled=True,
        state_machine_type=sfn.StateMachineType.STANDARD,
    )
    Validations.of(machine).acknowledge(
        Acknowledgment(id="AwsSolutions-SF1", reason="test state machine"),
        Acknowledgment(id="AwsSolutions-SF2", reason="test state machine"),
        Acknowledgment(id="AwsSolutions-IAM5[Resource::*]", reason="test state machine: X-Ray"),
    )
    api = HardenedRestApi(stack, "Api", cors_allowed_origins=["https://app.example.com"])
    verifier = SharedFunction(stack, "Verifier", code_root=PROBE, handler="probe_pkg.handler.handler").function
    auth = JwtTokenAuthorizer(stack, "Auth", function=verifier, cache_ttl=Duration.seconds(120))
    start = StepFunctionsStartExecution(
        stack,
        "Start",
        state_machine=machine,
        input_fields={"item": InputField.path("id"), "by": InputField.authorizer("sub")},
        cors_headers=api.cors_headers(),
    )
    model = api.add_model("Thing", {"type": "object", "additionalProperties": False, "properties": {}})
    method = (
        api.api.root.add_resource("things")
        .add_resource("{id}")
        .add_method(
            "POST",
            start.integration,
            authorizer=auth.authorizer,
            request_validator=api.body_validator,
            request_models={"application/json": model},
            method_responses=start.method_responses,
        )
    )
    for m in api.api.methods:
        if m.http_method == "OPTIONS":
            Validations.of(m).acknowledge(Acknowledgment(id="AwsSolutions-APIG4", reason="CORS preflight"))
    Validations.of(api.api).acknowledge(Acknowledgment(id="AwsSolutions-COG4", reason="Lambda authorizer"))
    acl = RegionalWebAcl(stack, "Acl", rate_limit=500)
    acl.associate("Stage", api.stage.stage_arn)
    return {"api": api, "method": method, "start": start, "machine": machine}


def test_constructs_together_are_nag_clean(tmp_path: Path) -> None:
    # Given the constructs composed in a stack checked by AwsSolutions
    app = App(outdir=str(tmp_path))
    stage = Stage(app, "Probe")
    Validations.of(stage).add_plugins(AwsSolutionsChecks(stage))
    stack = Stack(stage, "Rest")
    _build(stack)
    # When / Then synthesis passes every rule (APIG1/2/3/4/6 included)
    app.synth()


@pytest.fixture(scope="module")
def template() -> Template:
    stack = Stack(App(), "Rest")
    _build(stack)
    return Template.from_stack(stack)


def test_start_integration_role_starts_only_the_test_machine(template: Template) -> None:
    policies = template.find_resources("AWS::IAM::Policy")
    start = [p for k, p in policies.items() if k.startswith("StartRole")]
    assert len(start) == 1
    machine = _only(template, "TestMachine", "AWS::StepFunctions::StateMachine")
    assert start[0]["Properties"]["PolicyDocument"]["Statement"] == [
        {"Action": "states:StartExecution", "Effect": "Allow", "Resource": {"Ref": machine}}
    ]


def test_authorizer_cache_and_no_secret(template: Template) -> None:
    template.has_resource_properties(
        "AWS::ApiGateway::Authorizer",
        {
            "Type": "TOKEN",
            "AuthorizerResultTtlInSeconds": 120,
            "IdentitySource": "method.request.header.Authorization",
            "IdentityValidationExpression": BEARER_JWT,
        },
    )
    template.resource_count_is("AWS::SecretsManager::Secret", 0)


def test_a_401_carries_a_bearer_challenge_and_the_json_error_body(template: Template) -> None:
    template.has_resource_properties(
        "AWS::ApiGateway::GatewayResponse",
        {
            "ResponseType": "UNAUTHORIZED",
            "StatusCode": "401",
            "ResponseParameters": Match.object_like({"gatewayresponse.header.WWW-Authenticate": "'Bearer'"}),
            "ResponseTemplates": {"application/json": Match.string_like_regexp(r"\$context\.error\.messageString")},
        },
    )


def test_a_refused_body_names_the_failing_property(template: Template) -> None:
    template.has_resource_properties(
        "AWS::ApiGateway::GatewayResponse",
        {
            "ResponseType": "BAD_REQUEST_BODY",
            "StatusCode": "400",
            "ResponseTemplates": {
                "application/json": Match.string_like_regexp(r"\$context\.error\.validationErrorString")
            },
        },
    )


def test_defaults_are_hardened(template: Template) -> None:
    stage = next(iter(template.find_resources("AWS::ApiGateway::Stage").values()))["Properties"]
    assert stage["TracingEnabled"] is True
    assert stage["MethodSettings"][0]["DataTraceEnabled"] is False
    assert stage["MethodSettings"][0]["LoggingLevel"] == "INFO"
    assert stage["StageName"] == "v1"
    template.resource_count_is("AWS::ApiGateway::UsagePlan", 1)
    template.resource_count_is("AWS::ApiGateway::Account", 1)
    template.has_resource_properties(
        "AWS::ApiGateway::RestApi",
        {
            "EndpointConfiguration": {"Types": ["REGIONAL"]},
            "SecurityPolicy": "SecurityPolicy_TLS13_1_2_PFS_PQ_2025_09",
            "EndpointAccessMode": "STRICT",
        },
    )
    access_log = json.loads(stage["AccessLogSetting"]["Format"])
    assert access_log["tlsVersion"] == "$context.tlsVersion"
    template.has_resource_properties(
        "AWS::WAFv2::WebACL",
        {
            "Rules": [
                {"Priority": 0, "Name": "AWSManagedRulesAmazonIpReputationList"} | _any(),
                {"Priority": 1, "Name": "AWSManagedRulesCommonRuleSet"} | _any(),
                _rate(500),
                {"Priority": 3, "Name": "AWSManagedRulesKnownBadInputsRuleSet"} | _any(),
            ]
        },
    )


def test_waf_logs_to_an_encrypted_aws_waf_logs_group_without_the_authorization_header(template: Template) -> None:
    groups = {
        logical_id: group["Properties"]
        for logical_id, group in template.find_resources("AWS::Logs::LogGroup").items()
        if logical_id.startswith("AclLogs")
    }
    assert len(groups) == 1
    ((group_id, group),) = groups.items()
    assert group["LogGroupName"].startswith("aws-waf-logs-")
    assert group["RetentionInDays"] == 7
    key_id = group["KmsKeyId"]["Fn::GetAtt"][0]
    key_policy = template.find_resources("AWS::KMS::Key")[key_id]["Properties"]["KeyPolicy"]["Statement"]
    assert any('"logs."' in json.dumps(s.get("Principal", {})) for s in key_policy)  # CloudWatch Logs may use it
    logging = next(iter(template.find_resources("AWS::WAFv2::LoggingConfiguration").values()))["Properties"]
    acl_id = next(iter(template.find_resources("AWS::WAFv2::WebACL")))
    assert logging["ResourceArn"] == {"Fn::GetAtt": [acl_id, "Arn"]}
    assert logging["RedactedFields"] == [{"SingleHeader": {"Name": "authorization"}}]
    (destination,) = logging["LogDestinationConfigs"]
    rendered = json.dumps(destination)
    assert ":log-group:" in rendered
    assert group_id in rendered
    assert ":*" not in rendered


def test_a_log_key_encrypts_the_access_and_the_execution_log_groups() -> None:
    # Given an API with a log key
    stack = Stack(App(), "Keyed")
    key = kms.Key(stack, "LogsKey")
    HardenedRestApi(stack, "Api", cors_allowed_origins=["https://app.example.com"], log_encryption_key=key)

    groups = Template.from_stack(stack).find_resources("AWS::Logs::LogGroup")

    # Then both of its log groups are encrypted with it
    key_arn = {"Fn::GetAtt": [stack.get_logical_id(cast(kms.CfnKey, key.node.default_child)), "Arn"]}
    assert len(groups) == 2
    assert all(group["Properties"]["KmsKeyId"] == key_arn for group in groups.values())


def _any() -> dict[str, Any]:
    from aws_cdk.assertions import Match

    return {"Statement": Match.any_value(), "OverrideAction": {"None": {}}, "VisibilityConfig": Match.any_value()}


def _rate(limit: int) -> Any:
    from aws_cdk.assertions import Match

    return Match.object_like(
        {"Statement": {"RateBasedStatement": {"Limit": limit, "AggregateKeyType": "IP", "EvaluationWindowSec": 300}}}
    )


def _only(template: Template, prefix: str, kind: str | None = None) -> str:
    resources = template.to_json()["Resources"]
    ids = [k for k, v in resources.items() if k.startswith(prefix) and kind in (None, v["Type"])]
    assert len(ids) == 1, ids
    return ids[0]


def test_json_schema_translates_every_keyword() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "title": "T",
        "type": "object",
        "required": ["a"],
        "additionalProperties": False,
        "minProperties": 1,
        "properties": {
            "a": {"type": "string", "pattern": "^x$", "minLength": 1, "maxLength": 2, "enum": ["x"]},
            "b": {"type": "array", "minItems": 1, "maxItems": 3, "uniqueItems": True, "items": {"type": "boolean"}},
        },
    }
    # Given the schema as a model of the API / Then the template holds it unchanged
    stack = Stack(App(), "S")
    api = HardenedRestApi(stack, "Api", cors_allowed_origins=["https://a.example"])
    api.api.root.add_method("GET")
    api.add_model("T", schema)
    models = Template.from_stack(stack).find_resources("AWS::ApiGateway::Model")
    assert [m["Properties"]["Schema"] for m in models.values()] == [schema]


@pytest.mark.parametrize(
    ("schema", "message"),
    [({"type": "tuple"}, "unsupported type"), ({"type": "string", "format": "uuid"}, "keyword 'format'")],
)
def test_fails_on_schema_keywords_it_cannot_translate(schema: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        json_schema(schema)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cors_allowed_origins": []}, "at least one origin"),
        ({"cors_allowed_origins": ["*", "https://a.example"]}, "only entry"),
        ({"cors_allowed_origins": ["https://a.example"], "throttle_rate": 0}, "throttle_rate"),
        ({"cors_allowed_origins": ["https://a.example"], "throttle_burst": 0}, "throttle_burst"),
        ({"cors_allowed_origins": ["https://a.example"], "security_policy": "TLS_1_0"}, "security_policy must be"),
        ({"cors_allowed_origins": ["https://a.example"], "endpoint_access_mode": "LOOSE"}, "endpoint_access_mode"),
    ],
)
def test_fails_on_bad_rest_api_props(kwargs: dict[str, Any], message: str) -> None:
    stack = Stack(App(), "S")
    api = HardenedRestApi(stack, "Api", **kwargs)
    api.api.root.add_method("GET", apigw.MockIntegration())
    with pytest.raises(RuntimeError, match=r"\[S/Api\] .*" + message):
        Template.from_stack(stack)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"rate_limit": 5}, "rate_limit"), ({"evaluation_window_seconds": 30}, "evaluation_window_seconds")],
)
def test_fails_on_bad_web_acl_props(kwargs: dict[str, Any], message: str) -> None:
    stack = Stack(App(), "S")
    RegionalWebAcl(stack, "Acl", **kwargs)
    with pytest.raises(RuntimeError, match=r"\[S/Acl\] " + message):
        Template.from_stack(stack)


def test_fails_on_a_cache_longer_than_an_hour() -> None:
    stack = Stack(App(), "S")
    fn = SharedFunction(stack, "Fn", code_root=PROBE, handler="probe_pkg.handler.handler").function
    long_cache = JwtTokenAuthorizer(stack, "Auth", function=fn, cache_ttl=Duration.hours(2))
    api = apigw.RestApi(stack, "Api")  # an authorizer synthesizes only when a method uses it
    api.root.add_resource("a").add_method("GET", apigw.MockIntegration(), authorizer=long_cache.authorizer)
    with pytest.raises(RuntimeError, match=r"\[S/Auth\] cache_ttl must be 0..3600 seconds \(given 7200\)"):
        Template.from_stack(stack)


def test_method_responses_cover_every_integration_status() -> None:
    stack = Stack(App(), "S")
    parts = _build(stack)
    start: StepFunctionsStartExecution = parts["start"]
    assert [r.status_code for r in start.method_responses] == ["202", "400", "409", "500"]
    assert isinstance(start.integration, apigw.AwsIntegration)
