"""ApiStack, the agent registry's routes: admin-only, validated by the shared models, served by a
function that can touch the table and nothing else."""

from __future__ import annotations

import json
from typing import Any

from embedded.synth import SynthesizedStage
from lambdas.api import access
from lambdas.api.validation import REGISTER_AGENT, UPDATE_AGENT, gateway_schema
from tests.infra.test_api_rest import _methods, _resources

REGISTRY_ROUTES = {
    ("POST", "/admin/agents"),
    ("GET", "/admin/agents"),
    ("GET", "/admin/agents/{agent_id}"),
    ("PATCH", "/admin/agents/{agent_id}"),
    ("POST", "/admin/agents/{agent_id}/retire"),
}
HANDLER = "lambdas.api.admin_agents.handler"


def _model_schema(stage: SynthesizedStage, props: dict[str, Any]) -> dict[str, Any]:
    ref = props["RequestModels"]["application/json"]["Ref"]
    schema: dict[str, Any] = stage.templates["Api"]["Resources"][ref]["Properties"]["Schema"]
    return schema


def _registry_function(stage: SynthesizedStage) -> tuple[str, dict[str, Any]]:
    functions = _resources(stage, "AWS::Lambda::Function")
    matches = [(k, v) for k, v in functions.items() if v["Properties"]["Handler"] == HANDLER]
    assert len(matches) == 1, matches
    return matches[0]


def test_registry_routes_are_in_the_access_table_for_admins_only() -> None:
    for method, path in REGISTRY_ROUTES:
        assert access.route(method, path).roles == frozenset({access.ADMIN}), (method, path)
    assert not any(r.path.startswith("/admin/agents") for r in access.routes_for(access.AGENT))
    assert not any(r.path.startswith("/admin/agents") for r in access.routes_for(access.CUSTOMER))


def test_registry_routes_use_the_authorizer_and_the_registry_function(any_stage: SynthesizedStage) -> None:
    methods = _methods(any_stage)
    function_id, _ = _registry_function(any_stage)
    for key in REGISTRY_ROUTES:
        props = methods[key]
        assert props["AuthorizationType"] == "CUSTOM", key
        assert props["Integration"]["Type"] == "AWS_PROXY", key
        assert function_id in json.dumps(props["Integration"]["Uri"]), key


def test_bodies_are_checked_by_the_models_built_from_the_lambda_schemas(any_stage: SynthesizedStage) -> None:
    methods = _methods(any_stage)
    assert _model_schema(any_stage, methods[("POST", "/admin/agents")]) == gateway_schema(REGISTER_AGENT)
    assert _model_schema(any_stage, methods[("PATCH", "/admin/agents/{agent_id}")]) == gateway_schema(UPDATE_AGENT)
    for key in (
        ("GET", "/admin/agents"),
        ("GET", "/admin/agents/{agent_id}"),
        ("POST", "/admin/agents/{agent_id}/retire"),
    ):
        assert "RequestModels" not in methods[key], key


def test_listing_declares_its_optional_query_parameters(any_stage: SynthesizedStage) -> None:
    params = _methods(any_stage)[("GET", "/admin/agents")]["RequestParameters"]
    assert params == {
        "method.request.querystring.limit": False,
        "method.request.querystring.cursor": False,
        "method.request.querystring.status": False,
    }


def test_preflight_allows_patch_for_the_update_route(any_stage: SynthesizedStage) -> None:
    options = _methods(any_stage)[("OPTIONS", "/admin/agents/{agent_id}")]
    allowed = options["Integration"]["IntegrationResponses"][0]["ResponseParameters"][
        "method.response.header.Access-Control-Allow-Methods"
    ]
    assert "PATCH" in allowed.strip("'").split(",")


def test_registry_function_may_use_the_table_and_nothing_else(any_stage: SynthesizedStage) -> None:
    _, function = _registry_function(any_stage)
    assert set(function["Properties"]["Environment"]["Variables"]) >= {"TABLE_NAME"}
    role = function["Properties"]["Role"]["Fn::GetAtt"][0]
    actions: set[str] = set()
    for policy in _resources(any_stage, "AWS::IAM::Policy").values():
        if {"Ref": role} in policy["Properties"]["Roles"]:
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                value = statement["Action"]
                actions.update([value] if isinstance(value, str) else value)
    services = {action.split(":")[0] for action in actions}
    assert "dynamodb" in services
    assert services <= {"dynamodb", "kms", "xray", "logs", "sqs"}, services
    assert not any(action.startswith(("states:", "execute-api:")) for action in actions)
