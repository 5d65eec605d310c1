"""Each stage's capacity target against its synthesized templates, and the target's validation.

The templates must set every limit of the message path at or above what the stage's target needs
(the target's own load, without headroom): the route throttles, the REST throttle, the message
function's reserved concurrency, the stream router's settings. A limit that is hand-set is refused,
or checked against the target with the numbers in the message.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from embedded.synth import SynthesizedStage, stage_config
from stacks.capacity import CapacityConfig, router_batch_seconds
from stacks.config import ConfigError, load_stage_config, with_overrides
from tools.capacity import MESSAGE_HANDLER, _function, checks, render, template_limits

ROOT = Path(__file__).resolve().parents[2]


def _stages() -> dict[str, Any]:
    stages: dict[str, Any] = json.loads((ROOT / "cdk.json").read_text())["context"]["stages"]
    return stages


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_every_limit_in_the_templates_carries_the_stages_target(name: str, request: pytest.FixtureRequest) -> None:
    stage: SynthesizedStage = request.getfixturevalue(name)
    target = stage_config(name).capacity
    found = template_limits(stage.templates)
    messages = target.concurrent_chats * target.messages_per_chat_per_minute / 60
    assert found["sendMessage rate"] >= messages
    assert found["sendMessage burst"] >= messages
    assert found["rewind rate"] == found["sendMessage rate"]
    assert found["$connect rate"] >= target.connects_per_second
    assert found["WebSocket default rate"] >= max(messages, target.connects_per_second)
    assert found["REST rate"] >= target.concurrent_chats * target.rest_requests_per_chat_per_minute / 60
    # Every message the route admits runs at once for the reply's p95 duration: Little's law.
    assert found["message function reserved concurrency"] >= found["sendMessage rate"] * target.reply_p95_seconds
    batch, parallel = found["stream router batch size"], found["stream router parallelization factor"]
    records = messages * 4.2  # routed records a turn (the cost run)
    assert parallel * batch / router_batch_seconds(int(batch)) * max(1, math.ceil(messages * 5.12 / 1000)) >= records
    assert 1 <= found["stream router batching window (s)"] <= 5
    assert all(check.ok for check in checks(target, found)), render(name, target, found)[0]


def test_prod_is_sized_for_ten_thousand_chats_and_dev_for_a_small_team(
    dev: SynthesizedStage, prod: SynthesizedStage
) -> None:
    ours = template_limits(prod.templates)
    assert stage_config("prod").capacity.concurrent_chats >= 10_000
    assert ours["sendMessage rate"] >= 10_000 * 2 / 60 * 1.5  # 333 messages a second, with headroom
    assert ours["message function reserved concurrency"] == 2000
    assert ours["stream router parallelization factor"] > 1
    small = template_limits(dev.templates)
    assert small["sendMessage rate"] < 25
    assert small["message function reserved concurrency"] <= 20


def test_a_limit_below_the_target_is_reported_with_the_numbers(prod: SynthesizedStage) -> None:
    target = stage_config("prod").capacity
    # prod's old hand-set values: 25 messages a second for ~750 chats, 100 concurrent replies
    found = {**template_limits(prod.templates), "sendMessage rate": 25, "rewind rate": 25, "continue rate": 25}
    found["message function reserved concurrency"] = 100
    failing = {check.limit: check for check in checks(target, found) if not check.ok}
    assert set(failing) == {"sendMessage rate", "message function reserved concurrency"}
    assert round(failing["sendMessage rate"].need, 1) == 333.3
    assert failing["message function reserved concurrency"].need == 1334  # 333.3 a second for 4 s
    text, holds = render("prod", target, found)
    assert not holds
    assert "| sendMessage rate | 25 | at least 333.3 | BELOW (at least 333.3) |" in text


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_the_message_timeout_and_reply_deadline_derive_from_the_models_rate_and_the_reply_budget(
    name: str, request: pytest.FixtureRequest
) -> None:
    stage: SynthesizedStage = request.getfixturevalue(name)
    limits = stage_config(name).capacity.limits
    # 800 output tokens at 40 tokens a second after a first frame at 2 s: 22 s; 3 s more to store the reply
    assert (limits.reply_write_seconds, limits.reply_deadline_seconds, limits.message_timeout_seconds) == (22, 22, 25)
    _, function = _function(stage.templates, MESSAGE_HANDLER)
    assert function["Timeout"] == 25
    variables = function["Environment"]["Variables"]
    assert (variables["REPLY_DEADLINE_SECONDS"], variables["REPLY_MAX_TOKENS"]) == ("22", "800")
    assert template_limits(stage.templates)["continue rate"] == template_limits(stage.templates)["sendMessage rate"]


def test_a_slower_model_stops_at_the_routes_limit_and_is_continued() -> None:
    # 1,024 tokens at 20 a second would take 53.2 s: the sendMessage route waits 29 s, a cold start's 3 s included
    slow = dataclasses.replace(stage_config("prod").capacity, model_tokens_per_second=20, max_output_tokens=1024)
    limits = with_overrides(stage_config("prod"), capacity=slow).capacity.limits
    assert (round(limits.reply_write_seconds, 1), limits.reply_deadline_seconds) == (53.2, 23)
    assert limits.message_timeout_seconds == 26


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"message_timeout_seconds": 15},
            r"capacity.message_timeout_seconds must be at least 25 s: capacity.max_output_tokens \(800\) at "
            r"capacity.model_tokens_per_second \(40\) take 20 s after the first frame's 2 s, and storing the reply "
            r"3 s \(given 15\)",
        ),
        (
            {"message_timeout_seconds": 20, "model_tokens_per_second": 10},
            r"must be at least 26 s: .* take 80 s .* \(the route's most; a longer reply stops at the deadline",
        ),
        ({"message_timeout_seconds": 60}, r"message_timeout_seconds must be at most 26 s: .* waits 29 s"),
        ({"message_timeout_seconds": 901}, r"message_timeout_seconds must be a whole number in 1..900"),
        ({"model_tokens_per_second": 0}, r"capacity.model_tokens_per_second must be a number in 1..1000"),
        ({"max_output_tokens": 80.5}, r"capacity.max_output_tokens must be a whole number"),
    ],
)
def test_a_hand_set_message_timeout_too_short_for_the_longest_reply_fails_naming_what_it_needs(
    change: dict[str, Any], message: str
) -> None:
    target = dataclasses.replace(stage_config("prod").capacity, **change)
    with pytest.raises(ConfigError, match=message):
        with_overrides(stage_config("prod"), capacity=target)


def test_a_hand_set_message_timeout_with_room_for_the_longest_reply_sets_the_deadline() -> None:
    target = dataclasses.replace(stage_config("prod").capacity, message_timeout_seconds=26)
    limits = with_overrides(stage_config("prod"), capacity=target).capacity.limits
    assert (limits.message_timeout_seconds, limits.reply_deadline_seconds) == (26, 23)


def test_the_bedrock_need_is_a_named_figure_of_the_target() -> None:
    limits = stage_config("prod").capacity.limits
    # 500 messages a second admitted, 1.2 model calls a turn; 1,500 input and 5 x 160 output tokens a call.
    assert limits.bedrock_requests_per_minute == 36_000
    assert limits.bedrock_tokens_per_minute == 36_000 * (1500 + 5 * 160)


@pytest.mark.parametrize(
    ("key", "value"),
    [("ws_message_throttle_rate", 25), ("message_reserved_concurrency", 100), ("api_throttle_rate", 200)],
)
def test_a_hand_set_limit_is_refused_with_the_value_the_target_derives(key: str, value: int) -> None:
    stages = _stages()
    stages["prod"][key] = value
    derived = {"ws_message_throttle_rate": 500, "message_reserved_concurrency": 2000, "api_throttle_rate": 1500}[key]
    with pytest.raises(ConfigError, match=rf"\['{key}'\] are derived from the capacity block .*{key} {derived}\b"):
        load_stage_config(stages, "prod")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"chat_connection_messages_per_minute": 1},
            r"chat_connection_messages_per_minute must be at least capacity.messages_per_chat_per_minute \(2\)",
        ),
        (
            {"chat_customer_messages_per_minute": 1},
            r"chat_customer_messages_per_minute must be at least capacity.messages_per_chat_per_minute \(2\)",
        ),
        (
            {"lambda_timeout_seconds": 12},
            r"lambda_timeout_seconds leaves the model 2 s, less than capacity.reply_p95_seconds \(4\): .* 14 s",
        ),
        ({"waf_ip_rate_limit": 45_001}, r"REST throttle of 1500/s, so at most 45000 \(given 45001\)"),
    ],
)
def test_a_hand_set_limit_below_what_the_target_needs_fails_with_the_numbers(
    change: dict[str, int], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        with_overrides(stage_config("prod"), **change)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"concurrent_chats": 0}, r"capacity.concurrent_chats must be a number in 1..1e\+06 \(given 0\)"),
        ({"concurrent_chats": 2.5}, r"capacity.concurrent_chats must be a whole number"),
        ({"headroom": 0.5}, r"capacity.headroom must be a number in 1..10"),
        ({"first_frame_p95_seconds": 5}, r"first_frame_p95_seconds must not exceed capacity.reply_p95_seconds \(4\)"),
        # 100,000 chats at 100 connects a second need 25,300 requests a second of the gateway: above the region's 10,000
        ({"concurrent_chats": 100_000}, r"admitting 25300 requests a second, above API Gateway's regional 10000"),
    ],
)
def test_a_target_out_of_range_fails(change: dict[str, Any], message: str) -> None:
    target = dataclasses.replace(stage_config("prod").capacity, **change)
    with pytest.raises(ConfigError, match=message):
        with_overrides(stage_config("prod"), capacity=target)


def test_an_unknown_capacity_key_is_named() -> None:
    stages = _stages()
    stages["dev"]["capacity"] = {"chats": 10}
    with pytest.raises(ConfigError, match=r"unknown capacity keys \['chats'\]"):
        load_stage_config(stages, "dev")


def test_the_routers_parallel_batches_grow_with_each_shards_load_and_its_window_shrinks() -> None:
    # 50,000 chats: 2,500 messages a second admitted, 13 shards of ~808 records a second each
    limits = CapacityConfig(concurrent_chats=50_000, connects_per_second=10).limits
    assert limits.stream_shards == 13
    assert (limits.stream_batch_size, limits.stream_parallelization_factor) == (100, 4)
    assert limits.stream_batching_window_seconds == 1
    quiet = CapacityConfig(concurrent_chats=5).limits
    assert (quiet.stream_batch_size, quiet.stream_parallelization_factor, quiet.stream_batching_window_seconds) == (
        100,
        1,
        5,
    )
