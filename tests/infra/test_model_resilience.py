"""The ``model_resilience`` block: a fallback model that is another, Active model, and a cap on model calls."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest

from embedded.synth import cdk_context
from stacks.config import ConfigError, load_stage_config
from stacks.model_resilience import ModelResilienceConfig
from stacks.models import MODEL_CARDS, ModelCard

HAIKU = "global.anthropic.claude-haiku-4-5-20251001-v1:0"
SONNET = "global.anthropic.claude-sonnet-4-6"
DAY = date(2026, 11, 27)


@pytest.fixture(scope="module")
def stages() -> dict[str, Any]:
    return cdk_context()["stages"]


def _load(stages: dict[str, Any], block: Any, stage: str = "dev", **entry: Any) -> ModelResilienceConfig:
    values = {**stages[stage], "model_resilience": block, **entry}
    return load_stage_config({**stages, stage: values}, stage).model_resilience


def test_both_stages_fall_back_from_haiku_to_sonnet_under_a_cap(stages: dict[str, Any]) -> None:
    dev, prod = (load_stage_config(stages, name) for name in ("dev", "prod"))
    assert dev.bedrock_model_id == prod.bedrock_model_id == HAIKU
    assert dev.model_resilience == ModelResilienceConfig(SONNET, 5, 1, 5)
    assert prod.model_resilience == ModelResilienceConfig(SONNET, 500, 2, 10)


def test_the_defaults_are_sonnet_ten_calls_a_second_in_one_bucket() -> None:
    assert ModelResilienceConfig() == ModelResilienceConfig(SONNET, 10, 1, 5)


def test_a_fallback_is_active_only_between_its_launch_and_its_legacy_or_end_of_life() -> None:
    card = ModelCard("Probe", date(2026, 1, 1), legacy_from=date(2026, 6, 1), end_of_life=date(2026, 12, 1))
    assert [card.active_on(d) for d in (date(2025, 12, 31), date(2026, 1, 1), date(2026, 5, 31))] == [
        False,
        True,
        True,
    ]
    assert not card.active_on(date(2026, 6, 1))
    assert not ModelCard("Probe", date(2026, 1, 1), end_of_life=date(2026, 3, 1)).active_on(date(2026, 3, 1))
    assert MODEL_CARDS["anthropic.claude-sonnet-4-6"].active_on(DAY)


def test_fails_a_fallback_that_is_the_primary_model_even_behind_another_prefix(stages: dict[str, Any]) -> None:
    for fallback in (HAIKU, "us.anthropic.claude-haiku-4-5-20251001-v1:0", "anthropic.claude-haiku-4-5-20251001-v1:0"):
        with pytest.raises(ConfigError, match=r"model_resilience.fallback_model_id must be another model"):
            _load(stages, {"fallback_model_id": fallback})


def test_fails_a_fallback_whose_lifecycle_was_never_checked(stages: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"whose lifecycle was checked .*given 'global.anthropic.claude-opus-4-6'"):
        _load(stages, {"fallback_model_id": "global.anthropic.claude-opus-4-6"})


def test_fails_a_fallback_past_its_end_of_life_or_not_a_model(stages: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"reached its end of life on Amazon Bedrock on 2026-04-28"):
        _load(stages, {"fallback_model_id": "anthropic.claude-3-7-sonnet-20250219-v1:0"})
    with pytest.raises(ConfigError, match=r"model_resilience.fallback_model_id must be a Bedrock model id"):
        _load(stages, {"fallback_model_id": "Claude Sonnet"})


def test_fails_a_fallback_not_active_on_the_deploy_date() -> None:
    config = ModelResilienceConfig(SONNET)
    config.validate("dev", HAIKU, today=DAY)  # Active today
    with pytest.raises(ConfigError, match=r"names Claude Sonnet 4.6, which is not Active on 2026-02-16"):
        config.validate("dev", HAIKU, today=date(2026, 2, 16))  # the day before its launch


def test_no_fallback_and_a_stage_without_a_model_are_both_fine(stages: dict[str, Any]) -> None:
    assert _load(stages, {"fallback_model_id": None}).fallback_model_id is None
    assert _load(stages, {}, bedrock_model_id=None).fallback_model_id == SONNET  # ignored: the echo never fails


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("model_calls_per_second", 0),
        ("model_calls_per_second", 1001),
        ("model_calls_per_second", 2.5),
        ("model_calls_per_second", True),
        ("model_call_buckets", 0),
        ("model_call_buckets", 17),
        ("fallback_alarm_threshold", 0),
    ],
)
def test_fails_a_number_out_of_range(stages: dict[str, Any], key: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=rf"model_resilience.{key} must be a whole number in"):
        _load(stages, {key: value})


def test_fails_more_buckets_than_calls_a_second(stages: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"model_call_buckets must not exceed model_calls_per_second \(3\)"):
        _load(stages, {"model_calls_per_second": 3, "model_call_buckets": 4})


def test_fails_a_cap_below_the_replies_of_the_stages_capacity_target(stages: dict[str, Any]) -> None:
    # prod's target, 10,000 chats at two messages a minute each, is 333.3 model calls a second
    with pytest.raises(ConfigError, match=r"model_calls_per_second must be at least 334: .* 333\.3 messages"):
        _load(stages, {**stages["prod"]["model_resilience"], "model_calls_per_second": 333}, stage="prod")
    assert _load(stages, {**stages["prod"]["model_resilience"], "model_calls_per_second": 334}, stage="prod")
    # a stage without a model makes no model call to cap
    assert _load(stages, {"model_calls_per_second": 1}, stage="prod", bedrock_model_id=None)


def test_fails_unknown_keys_and_a_block_that_is_not_an_object(stages: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"unknown model_resilience keys \['fallback'\]"):
        _load(stages, {"fallback": SONNET})
    with pytest.raises(ConfigError, match=r"model_resilience must be an object"):
        _load(stages, [SONNET])
