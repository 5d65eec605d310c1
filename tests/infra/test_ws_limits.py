"""The chat's limits in the templates: per-route throttles on the WebSocket stage, the message function's
reserved concurrency, the stage settings on the functions; and the library's route_throttles prop."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk.assertions import Template

from embedded.synth import SynthesizedStage, stage_config
from tests.infra.test_api_websocket import api, function_id, resources
from tests.infra.test_api_websocket_constructs import _chat


def only_stage(stage: SynthesizedStage) -> dict[str, Any]:
    [found] = resources(api(stage), "AWS::ApiGatewayV2::Stage").values()
    return found


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_connect_and_send_message_have_their_own_throttles_from_the_stage_settings(
    name: str, request: pytest.FixtureRequest
) -> None:
    stage: SynthesizedStage = request.getfixturevalue(name)
    limits = stage_config(name).capacity.limits
    properties = only_stage(stage)["Properties"]
    assert properties["RouteSettings"] == {
        "$connect": {"ThrottlingRateLimit": limits.ws_connect_rate, "ThrottlingBurstLimit": limits.ws_connect_burst},
        "sendMessage": {"ThrottlingRateLimit": limits.ws_message_rate, "ThrottlingBurstLimit": limits.ws_message_burst},
        # A rewind is answered by the model like a message, so it is held to the message route's limit
        "rewind": {"ThrottlingRateLimit": limits.ws_message_rate, "ThrottlingBurstLimit": limits.ws_message_burst},
        # So is a continue: the rest of a reply cut short
        "continue": {"ThrottlingRateLimit": limits.ws_message_rate, "ThrottlingBurstLimit": limits.ws_message_burst},
    }
    # Each route's limit is below the stage's, so neither route can use up the other's share
    default = properties["DefaultRouteSettings"]
    for limits in properties["RouteSettings"].values():
        assert limits["ThrottlingRateLimit"] <= default["ThrottlingRateLimit"]
        assert limits["ThrottlingBurstLimit"] <= default["ThrottlingBurstLimit"]


def test_the_stage_values_differ_as_their_targets_derive_them(dev: SynthesizedStage, prod: SynthesizedStage) -> None:
    # dev: 50 chats at 2 messages a minute, times 1.5, at least the floor of 5; prod: 10,000 chats (333/s) times 1.5
    assert only_stage(dev)["Properties"]["RouteSettings"]["sendMessage"] == {
        "ThrottlingRateLimit": 5,
        "ThrottlingBurstLimit": 10,
    }
    assert only_stage(prod)["Properties"]["RouteSettings"]["sendMessage"] == {
        "ThrottlingRateLimit": 500,
        "ThrottlingBurstLimit": 1000,
    }


def test_the_stage_waits_for_the_routes_it_throttles(any_stage: SynthesizedStage) -> None:
    template = api(any_stage)
    routes = {
        res["Properties"]["RouteKey"]: lid for lid, res in resources(template, "AWS::ApiGatewayV2::Route").items()
    }
    depends = only_stage(any_stage).get("DependsOn", [])
    assert {routes["$connect"], routes["sendMessage"], routes["rewind"], routes["continue"]} <= set(depends)


@pytest.mark.parametrize(("name", "reserved"), [("dev", 20), ("prod", 2000)])
def test_the_message_function_has_the_stages_reserved_concurrency(
    name: str, reserved: int, request: pytest.FixtureRequest
) -> None:
    stage: SynthesizedStage = request.getfixturevalue(name)
    template = api(stage)
    message = template["Resources"][function_id(template, "lambdas.ws.message.handler")]["Properties"]
    assert (
        message["ReservedConcurrentExecutions"]
        == reserved
        == stage_config(name).capacity.limits.message_reserved_concurrency
    )


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_the_chat_functions_get_the_stages_message_and_connection_limits(
    name: str, request: pytest.FixtureRequest
) -> None:
    config = stage_config(name)
    template = api(request.getfixturevalue(name))
    for handler in ("lambdas.ws.message.handler", "lambdas.ws.connect.handler"):
        variables = template["Resources"][function_id(template, handler)]["Properties"]["Environment"]["Variables"]
        assert {
            "CHAT_CONNECTION_MESSAGES_PER_MINUTE",
            "CHAT_CONNECTION_BURST",
            "CHAT_CUSTOMER_MESSAGES_PER_MINUTE",
            "CHAT_CUSTOMER_BURST",
            "CHAT_MAX_CONNECTIONS_PER_CUSTOMER",
        } <= set(variables)
        assert variables["CHAT_CONNECTION_BURST"] == str(config.chat_connection_burst)
        assert variables["CHAT_MAX_CONNECTIONS_PER_CUSTOMER"] == str(config.chat_max_connections_per_customer)


@pytest.mark.parametrize(
    ("throttles", "message"),
    [
        ({"shout": apigwv2.ThrottleSettings(rate_limit=1, burst_limit=1)}, "route_throttles keys must be"),
        ({"$connect": apigwv2.ThrottleSettings(rate_limit=0, burst_limit=1)}, "needs rate_limit in"),
        ({"$connect": apigwv2.ThrottleSettings(rate_limit=1)}, "needs rate_limit in"),
    ],
)
def test_fails_invalid_route_throttles(throttles: dict[str, apigwv2.ThrottleSettings], message: str) -> None:
    stack = Stack(App(), "Invalid")
    _chat(stack, route_throttles=throttles)
    with pytest.raises(RuntimeError, match=r"\[Invalid/Chat\] .*" + message):
        Template.from_stack(stack)


def test_route_throttles_default_to_the_stages_limits_only() -> None:
    stack = Stack(App(), "Defaults")
    _chat(stack)
    [stage] = Template.from_stack(stack).find_resources("AWS::ApiGatewayV2::Stage").values()
    assert "RouteSettings" not in stage["Properties"]
