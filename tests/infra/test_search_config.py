"""The ``analytics_search`` block: off in both stages, private unless a setting says otherwise, clear errors."""

from __future__ import annotations

from typing import Any

import pytest

from embedded.synth import cdk_context
from stacks.config import ConfigError, load_stage_config
from stacks.search_config import AnalyticsSearchConfig

PRIVATE = {
    "enabled": True,
    "vpc_endpoint_id": "vpce-0123456789abcdef0",
    "subnet_ids": ["subnet-0abc1234", "subnet-0def5678"],
    "security_group_ids": ["sg-0abc1234"],
}


@pytest.fixture(scope="module")
def stages() -> dict[str, Any]:
    return cdk_context()["stages"]


def _load(stages: dict[str, Any], block: Any, stage: str = "dev") -> AnalyticsSearchConfig:
    return load_stage_config({**stages, stage: {**stages[stage], "analytics_search": block}}, stage).analytics_search


def test_both_stages_leave_it_off(stages: dict[str, Any]) -> None:
    for name in ("dev", "prod"):
        search = load_stage_config(stages, name).analytics_search
        assert search.enabled is False
        assert search.private is False


def test_the_defaults_are_a_private_collection_with_standby_replicas() -> None:
    search = AnalyticsSearchConfig()
    assert (search.enabled, search.public_access, search.standby_replicas) == (False, False, True)
    assert (search.index, search.buffer_seconds, search.buffer_mb, search.retry_seconds) == ("sessions", 60, 5, 300)


def test_a_private_collection_loads_with_its_endpoint_subnets_and_security_groups(stages: dict[str, Any]) -> None:
    search = _load(stages, PRIVATE, "prod")
    assert search.private
    assert search.vpc_endpoint_id == "vpce-0123456789abcdef0"
    assert search.subnet_ids == ("subnet-0abc1234", "subnet-0def5678")
    assert search.security_group_ids == ("sg-0abc1234",)


def test_a_public_collection_needs_the_setting_that_says_so(stages: dict[str, Any]) -> None:
    search = _load(stages, {"enabled": True, "public_access": True})
    assert (search.enabled, search.public_access, search.private) == (True, True, False)


def test_fails_when_on_without_a_network_path_and_says_both_ways_out(stages: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as raised:
        _load(stages, {"enabled": True})
    message = str(raised.value)
    assert message.startswith("stage 'dev': analytics_search.enabled needs ")
    assert "['security_group_ids', 'subnet_ids', 'vpc_endpoint_id']" in message
    assert "or public_access true" in message


def test_fails_on_a_private_collection_missing_one_piece(stages: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"analytics_search.enabled needs \['security_group_ids'\]"):
        _load(stages, {**PRIVATE, "security_group_ids": []})


def test_fails_on_vpc_settings_beside_public_access(stages: dict[str, Any]) -> None:
    with pytest.raises(
        ConfigError, match=r"analytics_search.public_access is true, so the collection takes no VPC settings"
    ):
        _load(stages, {**PRIVATE, "public_access": True})


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({**PRIVATE, "index": "Sessions"}, r"analytics_search.index must be 1-80 lowercase .* \(given 'Sessions'\)"),
        ({**PRIVATE, "index": "_sessions"}, r"analytics_search.index must be"),
        ({**PRIVATE, "vpc_endpoint_id": "vpc-123"}, r"analytics_search.vpc_endpoint_id must be an OpenSearch"),
        ({**PRIVATE, "subnet_ids": ["subnet-XYZ"]}, r"analytics_search.subnet_ids must list at most 16 ids"),
        ({**PRIVATE, "subnet_ids": "subnet-0abc1234"}, r"analytics_search.subnet_ids must be a list of strings"),
        ({**PRIVATE, "security_group_ids": ["sg-1"] * 6}, r"analytics_search.security_group_ids must list at most 5"),
        ({**PRIVATE, "buffer_mb": 101}, r"analytics_search.buffer_mb must be a whole number in 1..100 \(given 101\)"),
        ({**PRIVATE, "buffer_seconds": 901}, r"analytics_search.buffer_seconds must be a whole number in 0..900"),
        ({**PRIVATE, "retry_seconds": 7201}, r"analytics_search.retry_seconds must be a whole number in 0..7200"),
        ({**PRIVATE, "retry_seconds": True}, r"analytics_search.retry_seconds must be a whole number"),
        ({**PRIVATE, "enabled": "yes"}, r"analytics_search.enabled must be true or false \(given 'yes'\)"),
        ({**PRIVATE, "standby_replicas": 0}, r"analytics_search.standby_replicas must be true or false"),
        ({**PRIVATE, "collection_type": "SEARCH"}, r"unknown analytics_search keys \['collection_type'\]"),
        ([], r"stage 'dev': analytics_search must be an object \(given \[\]\)"),
    ],
)
def test_fails_on_a_bad_block(stages: dict[str, Any], block: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(stages, block)


def test_a_disabled_block_is_still_checked(stages: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"analytics_search.index must be"):
        _load(stages, {"enabled": False, "index": "Bad Index"})
