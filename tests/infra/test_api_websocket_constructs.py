"""SecureWebSocketApi and OnboardingWorkflow on their own: defaults, grants, fail-fast props, cdk-nag."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Duration, Stack, Stage, Validations
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk.assertions import Match, Template
from cdk_nag import AwsSolutionsChecks

from constructs_lib import SecureWebSocketApi, SharedFunction
from constructs_lib.workflow_defaults import WorkflowOptions
from stacks.workflows.onboarding import OnboardingWorkflow

PROBE = Path(__file__).resolve().parents[1] / "fixtures" / "probe_pkg"


def _functions(stack: Stack) -> Callable[[str], lambda_.Function]:
    return lambda name: SharedFunction(stack, name, code_root=PROBE, handler="probe_pkg.handler.handler").function


def _chat(stack: Stack, **overrides: Any) -> SecureWebSocketApi:
    fn = _functions(stack)
    props: dict[str, Any] = {
        "stage_name": "test",
        "authorizer_handler": fn("Auth"),
        "connect_handler": fn("Connect"),
        "disconnect_handler": fn("Disconnect"),
        "default_handler": fn("Default"),
        "routes": {"sendMessage": fn("Message")},
    }
    props.update(overrides)
    return SecureWebSocketApi(stack, "Chat", **props)


@pytest.fixture(scope="module")
def defaults() -> Template:
    stack = Stack(App(), "Defaults")
    chat = _chat(stack)
    chat.grant_manage_connections(_functions(stack)("Poster"))
    return Template.from_stack(stack)


def test_defaults_throttle_and_log_the_stage(defaults: Template) -> None:
    defaults.has_resource_properties(
        "AWS::ApiGatewayV2::Stage",
        {
            "StageName": "test",
            "AutoDeploy": True,
            "DefaultRouteSettings": {"ThrottlingRateLimit": 50, "ThrottlingBurstLimit": 100},
            "AccessLogSettings": {"DestinationArn": Match.any_value(), "Format": Match.string_like_regexp("routeKey")},
        },
    )
    defaults.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 7})


def test_default_identity_source_is_the_token_query_parameter(defaults: Template) -> None:
    defaults.has_resource_properties(
        "AWS::ApiGatewayV2::Authorizer",
        {"AuthorizerType": "REQUEST", "IdentitySource": ["route.request.querystring.token"]},
    )


def test_grant_is_post_on_this_stages_connections_only(defaults: Template) -> None:
    defaults.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        {
                            "Action": "execute-api:ManageConnections",
                            "Effect": "Allow",
                            "Resource": {
                                "Fn::Join": [
                                    "",
                                    Match.array_with([Match.string_like_regexp("/test/POST/@connections/\\*$")]),
                                ]
                            },
                        }
                    ]
                )
            }
        },
    )


def test_grant_of_other_methods_on_request() -> None:
    stack = Stack(App(), "Methods")
    chat = _chat(stack)
    chat.grant_manage_connections(_functions(stack)("Closer"), "POST", "DELETE")
    text = str(Template.from_stack(stack).to_json())
    assert "/test/DELETE/@connections/*" in text


def test_fails_on_a_grant_of_a_method_the_management_api_has_not() -> None:
    stack = Stack(App(), "Methods")
    chat = _chat(stack)
    chat.grant_manage_connections(_functions(stack)("Bad"), "PATCH")
    with pytest.raises(RuntimeError, match=r"\[Methods/\w+\] methods must be POST, GET or DELETE \(given 'PATCH'\)"):
        Template.from_stack(stack)


def test_nag_clean_with_the_grant(tmp_path: Path) -> None:
    app = App(outdir=str(tmp_path))
    stage = Stage(app, "NagProbe")
    Validations.of(stage).add_plugins(AwsSolutionsChecks(stage))
    stack = Stack(stage, "Probe")
    chat = _chat(stack)
    chat.grant_manage_connections(_functions(stack)("Poster"))
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    OnboardingWorkflow(
        stack,
        "Onboarding",
        prepare_function=_functions(stack)("Prepare"),
        deliver_function=_functions(stack)("Deliver"),
        options=WorkflowOptions(encryption_key=key),
    )
    app.synth()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"stage_name": "bad stage"}, "stage_name must be 1-128"),
        ({"routes": {"$connect": None}}, "route keys must be action names"),
        ({"identity_source": ()}, "identity_source must name at least one source"),
        ({"identity_source": ("header.Authorization",)}, "identity_source entries look like"),
        ({"throttle_rate_limit": 0}, "throttle_rate_limit must be in"),
        ({"throttle_burst_limit": 6000}, "throttle_burst_limit in"),
        (
            {"existing_access_log_group": "LOG", "access_log_group_props": logs.LogGroupProps()},
            "give existing_access_log_group or access_log_group_props, not both",
        ),
    ],
)
def test_fails_invalid_websocket_props(overrides: dict[str, Any], message: str) -> None:
    stack = Stack(App(), "Invalid")
    if overrides.get("existing_access_log_group") == "LOG":
        overrides["existing_access_log_group"] = logs.LogGroup(stack, "Existing")
    if overrides.get("routes") == {"$connect": None}:
        overrides["routes"] = {"$connect": _functions(stack)("Extra")}
    _chat(stack, **overrides)
    with pytest.raises(RuntimeError, match=r"\[Invalid/Chat\] .*" + message):
        Template.from_stack(stack)


@pytest.fixture(scope="module")
def workflow() -> Template:
    stack = Stack(App(), "Workflow")
    fn = _functions(stack)
    OnboardingWorkflow(
        stack,
        "Onboarding",
        prepare_function=fn("Prepare"),
        deliver_function=fn("Deliver"),
        options=WorkflowOptions(encryption_key=kms.Key(stack, "Key")),
    )
    return Template.from_stack(stack)


def test_workflow_defaults_are_hardened(workflow: Template) -> None:
    workflow.has_resource_properties(
        "AWS::StepFunctions::StateMachine",
        {
            "StateMachineType": "EXPRESS",
            "TracingConfiguration": {"Enabled": True},
            "LoggingConfiguration": Match.object_like({"Level": "ALL", "IncludeExecutionData": False}),
        },
    )
    workflow.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 7, "KmsKeyId": Match.any_value()})
    workflow.has_resource_properties("AWS::CloudWatch::Alarm", {"MetricName": "ExecutionsFailed", "Threshold": 1})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"timeout": Duration.minutes(6)}, "timeout must be 1 s..5 min"),
        ({"delivery_max_attempts": 0}, "delivery_max_attempts must be 1..20"),
        ({"delivery_interval": Duration.seconds(10)}, "delivery_interval must be >= 1 s and <= delivery_max_delay"),
    ],
)
def test_fails_invalid_workflow_props(overrides: dict[str, Any], message: str) -> None:
    app = App()
    stack = Stack(app, "Invalid")
    fn = _functions(stack)
    timeout = overrides.pop("timeout", None)
    OnboardingWorkflow(
        stack,
        "Onboarding",
        prepare_function=fn("Prepare"),
        deliver_function=fn("Deliver"),
        options=WorkflowOptions(encryption_key=kms.Key(stack, "Key"), timeout=timeout),
        **overrides,
    )

    with pytest.raises(RuntimeError, match=r"\[Invalid/Onboarding(/Default)?\] " + message):
        app.synth()


def _bedrock_resources(model_id: str) -> list[Any]:
    from aws_cdk import aws_iam as iam

    from stacks.functions import grant_invoke_model

    stack = Stack(App(), "Bedrock", env={"account": "123456789012", "region": "eu-west-1"})
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    grant_invoke_model(role, model_id)
    [policy] = Template.from_stack(stack).find_resources("AWS::IAM::Policy").values()
    [statement] = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Action"] == "bedrock:InvokeModel"
    resource = statement["Resource"]
    return resource if isinstance(resource, list) else [resource]


def test_bedrock_grant_names_one_foundation_model() -> None:
    assert _bedrock_resources("anthropic.claude-3-haiku-20240307-v1:0") == [
        {
            "Fn::Join": [
                "",
                [
                    "arn:",
                    {"Ref": "AWS::Partition"},
                    ":bedrock:eu-west-1::foundation-model/anthropic.claude-3-haiku-20240307-v1:0",
                ],
            ]
        }
    ]


def test_bedrock_grant_of_an_inference_profile_covers_the_profile_and_its_model() -> None:
    resources = [str(r) for r in _bedrock_resources("eu.anthropic.claude-3-haiku-20240307-v1:0")]
    assert any(
        ":bedrock:eu-west-1:123456789012:inference-profile/eu.anthropic.claude-3-haiku-20240307-v1:0" in r
        for r in resources
    )
    assert any(":bedrock:*::foundation-model/anthropic.claude-3-haiku-20240307-v1:0" in r for r in resources)
    assert len(resources) == 2
