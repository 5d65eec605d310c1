"""API Gateway's throttles on the embedded stage, at dev's own values, with the clock frozen.

The story's stage sizes its gateway throttles above what the scripted runs send; here each test
puts dev's configured value back on one route or method of the synthesized templates and sends
a burst with the stage's clock frozen, so no refill hides part of it and the outcome does not
depend on how fast the machine is: exactly ``burst`` requests pass, the others get 429.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from embedded import EmbeddedStage, embedded_stage
from embedded.cloudformation.assembly import StackTemplate, load_assembly
from embedded.services.apigateway_websocket import ConnectionRefused
from embedded.synth import StageAssembly, stage_config
from lambdas.shared import keys
from local.story.chat import Chat, open_chat, sign_in, table_name

pytestmark = pytest.mark.slow

DEV_CONFIG = stage_config("dev")
DEV = DEV_CONFIG.capacity.limits  # the gateway throttles dev's capacity target derives
TOO_MANY = "Too Many Requests"


def _stage_resource(templates: list[StackTemplate], resource_type: str) -> dict[str, Any]:
    (found,) = [r["Properties"] for t in templates for r in t.resources.values() if r["Type"] == resource_type]
    return dict(found)


@pytest.fixture(scope="module")
def stage(synthesized: StageAssembly) -> Iterator[EmbeddedStage]:
    """The story's stage with dev's route and method throttles."""
    templates = load_assembly(synthesized.assembly_dir)
    websocket = _stage_resource(templates, "AWS::ApiGatewayV2::Stage")
    websocket["RouteSettings"]["sendMessage"] = {
        "ThrottlingRateLimit": DEV.ws_message_rate,
        "ThrottlingBurstLimit": DEV.ws_message_burst,
    }
    websocket["RouteSettings"]["$connect"] = {
        "ThrottlingRateLimit": DEV.ws_connect_rate,
        "ThrottlingBurstLimit": DEV.ws_connect_burst,
    }
    rest = _stage_resource(templates, "AWS::ApiGateway::Stage")
    for setting in rest["MethodSettings"]:
        setting.update(ThrottlingRateLimit=DEV.rest_rate, ThrottlingBurstLimit=DEV.rest_burst)
    for template in templates:  # the edited copies replace the originals
        for resource in template.resources.values():
            if resource["Type"] == "AWS::ApiGatewayV2::Stage":
                resource["Properties"] = websocket
            if resource["Type"] == "AWS::ApiGateway::Stage":
                resource["Properties"] = rest
    with embedded_stage(templates) as deployed:
        yield deployed


def _tat(stage: EmbeddedStage, scope: str, subject: str) -> int:
    key = keys.rate_bucket_key(scope, subject)
    item = stage.client("dynamodb").get_item(
        TableName=table_name(stage), Key={k: {"S": v} for k, v in key.items()}, ConsistentRead=True
    )["Item"]
    return int(item["tat"]["N"])


def test_a_burst_over_the_send_message_throttle_gets_429_and_only_what_got_through_is_counted(
    stage: EmbeddedStage,
) -> None:
    # Given two customers chatting, and the app's per-connection burst above what each sends
    alice, bob = open_chat(stage, "throttled-alice"), open_chat(stage, "throttled-bob")
    each = DEV.ws_message_burst // 2 + 2
    assert each <= DEV_CONFIG.chat_connection_burst
    # When both send a burst together, faster than any refill (the clock stands still)
    sent: dict[str, list[Any]] = {alice.who: [], bob.who: []}
    with stage.clock.frozen():
        now_ms = int(stage.clock() * 1000)
        for n in range(each):
            for chat in (alice, bob):
                sent[chat.who].extend(chat.say(f"burst {n}"))
    # Then exactly the route's burst got through and the rest were refused by the gateway
    throttled = {who: [f for f in frames if f.get("message") == TOO_MANY] for who, frames in sent.items()}
    passed = {who: each - len(t) for who, t in throttled.items()}
    assert sum(passed.values()) == DEV.ws_message_burst
    assert sum(len(t) for t in throttled.values()) == 2 * each - DEV.ws_message_burst
    assert stage.websocket.throttle.refused["sendMessage"] == 2 * each - DEV.ws_message_burst
    # And the application counted in its buckets exactly the messages that reached it
    interval = -(-60_000 // DEV_CONFIG.chat_connection_messages_per_minute)
    for chat in (alice, bob):
        replies = [f for f in sent[chat.who] if f.get("type") == "final"]
        assert len(replies) == passed[chat.who], sent[chat.who]
        assert _tat(stage, "conn", chat.connection_id) == now_ms + passed[chat.who] * interval


def test_a_connect_burst_over_the_connect_throttle_is_refused_with_429(stage: EmbeddedStage) -> None:
    tokens = [sign_in(stage, f"connect-{n}", "customer") for n in range(DEV.ws_connect_burst + 2)]
    refused: list[int] = []
    with stage.clock.frozen():
        for token in tokens:
            try:
                stage.websocket.connect(query={"token": token})
            except ConnectionRefused as error:
                refused.append(error.status)
    assert refused == [429, 429]


def test_a_burst_of_rest_calls_over_the_method_throttle_gets_429_from_the_gateway(stage: EmbeddedStage) -> None:
    chat: Chat = open_chat(stage, "rest-burst")
    statuses: list[int] = []
    with stage.clock.frozen():
        for _ in range(DEV.rest_burst + 3):
            statuses.append(stage.rest.request("GET", f"/sessions/{chat.session_id}", headers=chat.auth()).status)
    assert statuses.count(429) == 3
    assert statuses[: DEV.rest_burst] == [200] * DEV.rest_burst
